"""Helpers for rollout-ext policy hooks written in Python (built with hooks-sdk/python/build.sh,
which puts this module beside the hook's own).

What the Rust SDK gives a hook, for Python: the short form (NAME and a function per point
served, each taking the arguments it names; see `hook_exports`), base classes whose every method
defers (a hook writes a class only for the points it serves: the build puts in a deferring one
for each point left out, and declares the points served), `describe`, `PROCEED`, `DEFER`, `abort`, `hold_while` and `abort_if_any` (a gate's answers),
the phases, `hold` (wait for N checks, then abort), `candidates_of`, `choose_by` and `choose_by_rules` (order the candidates by
several rules, with reasons), week windows,
`percent_of`, the plugin's estimates (`estimates`, `batch_ends`), what other tools are taking
out (`others_disrupting`, `disrupted_by`), and typed views of the objects hooks read most, with
the API's defaults.
"""

import functools
import inspect
import json
from dataclasses import dataclass, field

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types

# The contract this module is built against: the package version of hooks-sdk/wit/policy.wit.
WIT_VERSION = "0.3.7"

POINTS = {
    "select": types.HookPoint.SELECT,
    "batch": types.HookPoint.BATCH,
    "gate": types.HookPoint.GATE,
}


# The points the hook's classes serve, found by the build's entry module (`hook_exports`).
_served = None


def describe(name, points=None):
    """The module's `describe` answer: its name and the points (`"select"`, `"batch"`,
    `"gate"`) it serves; without `points`, those its classes serve."""
    if points is None:
        points = list(_served or [])
    for p in points:
        if p not in POINTS:
            raise ValueError(f"describe: unknown point {p!r} (one of {', '.join(POINTS)})")
    return types.Info(
        name=name,
        sdk_version=WIT_VERSION,
        wit_version=WIT_VERSION,
        points=[POINTS[p] for p in points],
    )


def config_object(config):
    """The hook's config as a dict; an error the plugin shows when it is not a JSON object."""
    try:
        value = json.loads(config)
    except ValueError as e:
        raise Err(f"config is not JSON: {e}")
    if not isinstance(value, dict):
        raise Err("config must be an object")
    return value


class AnyConfig(exports.Metadata):
    """Metadata that accepts any JSON object as config and describes the hook as `NAME` with the
    points its classes serve: `class Metadata(AnyConfig): NAME = "my-policy"`."""

    NAME = None

    def describe(self):
        if not self.NAME:
            raise ValueError(f"{type(self).__name__} sets no NAME (NAME = \"my-policy\")")
        return describe(self.NAME)

    def validate_config(self, config: str) -> None:
        config_object(config)


class DeferSelection(exports.Selection):
    def select(self, ctx, group, candidates):
        return types.Selection_Defer()


class DeferBatching(exports.Batching):
    def next_batch(self, ctx, progress, pending):
        return types.BatchSize_Defer()


class DeferGates(exports.Gates):
    def check(self, ctx, phase, batch, summary):
        return types.Verdict_Defer()


# Each point: the class that serves it, the method, and the SDK's deferring class.
_POINT_CLASSES = (
    ("select", "Selection", "select", DeferSelection),
    ("batch", "Batching", "next_batch", DeferBatching),
    ("gate", "Gates", "check", DeferGates),
)

# The short form: module-level functions, each a point (or a gate asked in one phase only).
_FUNCTIONS = {
    "select": "select",
    "next_batch": "batch",
    "check": "gate",
    "before_group": "gate",
    "before_batch": "gate",
    "after_batch": "gate",
}

# The gates asked in one phase only.
_PHASE_FUNCTIONS = ("before_group", "before_batch", "after_batch")

# What each call offers a short-form function, by parameter name; a function names those it
# reads, in any order.
_OFFERED = {
    "select": ("ctx", "config", "now", "group", "candidates", "chosen"),
    "next_batch": ("ctx", "config", "now", "group", "progress", "pending"),
    "check": ("ctx", "config", "now", "phase", "batch", "summary"),
}


def _short_form(app, file, function):
    """The call of the module's function `function` with the arguments its parameters name,
    refused at build time when one names nothing offered."""
    fn = getattr(app, function)
    offered = _OFFERED.get(function) or tuple(n for n in _OFFERED["check"] if n != "phase")
    names = []
    for p in inspect.signature(fn).parameters.values():
        if p.name not in offered or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(
                f"rollout-ext-build: {file}'s {function} takes {p.name!r}, which is none of its "
                f"arguments ({', '.join(offered)}): name those it reads, in any order"
            )
        names.append(p.name)

    def call(ctx, **given):
        # Each argument is made only when the function names it.
        given.update(ctx=lambda: ctx, config=lambda: config_object(ctx.config), now=lambda: ctx.now)
        answer = fn(**{n: given[n]() for n in names})
        if answer is None:
            raise Err(f"{file}'s {function} answered nothing (it returned None): return its answer")
        return answer

    return call


def _short_form_classes(app, file):
    """The Selection, Batching and Gates classes serving the module's point functions (None for
    a point it has no function for), and its Metadata when it sets NAME."""
    found = [f for f in _FUNCTIONS if callable(getattr(app, f, None))]
    for point, name, _, _ in _POINT_CLASSES:
        mine = [f for f in found if _FUNCTIONS[f] == point]
        if mine and getattr(app, name, None) is not None:
            raise TypeError(
                f"rollout-ext-build: {file} serves point {point!r} twice, by class {name} and by "
                f"{mine[0]}: keep one"
            )
    phase_gates = [f for f in found if f in _PHASE_FUNCTIONS]
    if "check" in found and phase_gates:
        raise TypeError(
            f"rollout-ext-build: {file} has check and a phase's gate ({', '.join(phase_gates)}): "
            "check is asked in every phase; keep it or the phase functions"
        )
    calls = {f: _short_form(app, file, f) for f in found}
    classes = {}
    if "select" in calls:
        class Selection(exports.Selection):
            def select(self, ctx, group, candidates):
                # Read from the host once, whether the function takes both or one.
                everyone = functools.cache(lambda: candidates_of(candidates))
                # The current choice: the candidates with a reason.
                chosen = lambda: [c for c in everyone() if c.reason is not None]
                return calls["select"](ctx, group=lambda: group, candidates=everyone, chosen=chosen)
        classes["Selection"] = Selection
    if "next_batch" in calls:
        class Batching(exports.Batching):
            def next_batch(self, ctx, progress, pending):
                return calls["next_batch"](ctx, group=lambda: progress.group,
                                           progress=lambda: progress,
                                           pending=lambda: candidates_of(pending))
        classes["Batching"] = Batching
    phases = dict(zip((BEFORE_GROUP, BEFORE_BATCH, AFTER_BATCH), _PHASE_FUNCTIONS))
    if any(_FUNCTIONS[f] == "gate" for f in calls):
        class Gates(exports.Gates):
            def check(self, ctx, phase, batch, summary):
                call = calls.get("check") or calls.get(phases.get(phase))
                if call is None:
                    return DEFER
                return call(ctx, phase=lambda: phase, batch=lambda: batch, summary=lambda: summary)
        classes["Gates"] = Gates
    for point, name, _, _ in _POINT_CLASSES:
        if name in classes:
            classes[name].served_by = " and ".join(f for f in calls if _FUNCTIONS[f] == point)
    if isinstance(getattr(app, "NAME", None), str) and getattr(app, "Metadata", None) is None:
        classes["Metadata"] = type("Metadata", (AnyConfig,), {"NAME": app.NAME})
    return classes


def hook_exports(app):
    """What the build's entry module exports for the hook module `app`: its Metadata, checked so
    that `describe` declares every point a class serves (a point served but not declared would
    never be asked, silently), and its Selection, Batching and Gates, the SDK's deferring class
    for each one left out. A module in the short form (NAME and functions `select`,
    `next_batch`, `check` or a phase's gate `before_group`, `before_batch`, `after_batch`, each
    taking the arguments it names) has its classes made here."""
    global _served
    file = f"{app.__name__}.py"
    short = _short_form_classes(app, file)
    metadata = getattr(app, "Metadata", None) or short.get("Metadata")
    if metadata is None:
        raise AttributeError(
            f'rollout-ext-build: {file} sets no NAME and defines no class Metadata: every hook has one (NAME = "my-policy")'
        )
    served, classes = {}, []
    for point, name, method, defer in _POINT_CLASSES:
        cls = getattr(app, name, None) or short.get(name) or defer
        if getattr(cls, method, None) is not getattr(defer, method):
            served[point] = getattr(cls, "served_by", f"class {name}")
        classes.append(cls)
    _served = list(served)
    names = {v: k for k, v in POINTS.items()}

    class Checked(metadata):
        def describe(self):
            info = super().describe()
            declared = {names.get(p, p) for p in info.points}
            for point, where in served.items():
                if point not in declared:
                    raise ValueError(
                        f"describe: {file}'s {where} serves point {point!r}, which describe "
                        "leaves out of its points: declare it, or leave the points out "
                        "(describe(name) declares those served)"
                    )
            return info

    Checked.__name__ = Checked.__qualname__ = "Metadata"
    return (Checked, *classes)


def size(count, reason):
    """A batch of `count` instances, with why."""
    return types.BatchSize_Size(types.SizedBatch(count=count, reason=reason))


def at_most(count, progress, reason):
    """A batch of `count`, or of as many as the budget allows now (`progress.max_batch`) when
    that is fewer, the reason then saying so: "weekend (2 allowed now)". A size over it would be
    an invalid answer."""
    if count > progress.max_batch:
        return size(progress.max_batch, f"{reason} ({progress.max_batch} allowed now)")
    return size(count, reason)


def choose(pairs):
    """A selection of `(name, reason)` pairs, in update order."""
    return types.Selection_Choose(
        [types.Choice(name=n, reason=r, force=False) for n, r in pairs]
    )


def choose_by(items, key, reason):
    """A selection of `items` ordered by `key(item)`, smallest first, each with the reason
    `reason(item)` gives: several rules are one tuple key, the first deciding (False before
    True; negate a count for largest first); ties keep the order they came in. `key` is called
    once per item, so a label read in it is one host call each."""
    return choose((i.name, reason(i)) for i in sorted(items, key=lambda i: _none_first(key(i))))


def _none_first(key):
    """A sort key in which None comes first and compares with anything, as in the Rust and
    JavaScript SDKs (Python compares None with nothing): each part of a tuple key, or the key."""
    parts = key if isinstance(key, tuple) else (key,)
    return tuple((p is not None, p) for p in parts)


def choose_by_rules(items, rules):
    """A selection of `items` ordered by `rules`, each `(name, key)` or `(name, key, detail)`:
    the first deciding, each later one breaking the ties of those before it (smallest key first:
    False before True, negate a count for largest first; ties on every rule keep the items'
    order). Each choice's reason names the rule that puts it before the next one (the last:
    after the one before it), with `detail(item)` when the rule has one. Keys are read once per
    item and rule. The last says which one it follows and by what rule, candidates tied on
    every rule say so, and a lone one is "the only candidate"."""
    items = list(items)
    keys = [tuple(rule[1](i) for rule in rules) for i in items]
    order = sorted(range(len(items)), key=lambda n: _none_first(keys[n]))

    def reason(at):
        n = order[at]
        if len(order) == 1:
            return "the only candidate"
        last = at + 1 == len(order)
        other = order[at - 1] if last else order[at + 1]
        for rule, mine, theirs in zip(rules, keys[n], keys[other]):
            if mine != theirs:
                said = f"{rule[0]}: {rule[2](items[n])}" if len(rule) > 2 else rule[0]
                # The last is placed after the one before it, not before anything.
                return f"after {items[other].name} by {said}" if last else said
        return f"tied with {items[other].name} on every rule"

    return choose((items[n].name, reason(at)) for at, n in enumerate(order))


class Candidate:
    """One of the candidates a selection is asked about: the Instance's fields (`name`, `zone`,
    `created`, `pods`, `up_to_date`, `reason`, ...) and its labels, annotations and taints, read
    from the host when asked (one call each)."""

    def __init__(self, instances, index, instance):
        self._instances, self.index, self._instance = instances, index, instance

    def __getattr__(self, name):
        return getattr(self._instance, name)

    def __repr__(self):
        return f"Candidate({self._instance.name!r})"

    @property
    def zone(self):
        """The instance's zone, "" when it has none (as the Rust SDK's `zone`)."""
        return self._instance.zone or ""

    def label(self, key):
        return self._instances.label(self.index, key)

    def annotation(self, key):
        return self._instances.annotation(self.index, key)

    def labels(self):
        return {kv.key: kv.value for kv in self._instances.labels(self.index)}

    def annotations(self):
        return {kv.key: kv.value for kv in self._instances.annotations(self.index)}

    def taints(self):
        """The instance's taints, each with `key`, `value` and `effect`."""
        return self._instances.taints(self.index)

    def has_taint(self, key):
        """Whether the instance carries a taint `key` (any value and effect)."""
        return any(t.key == key for t in self.taints())


def candidates_of(instances):
    """The candidates of a selection (its `candidates` argument) as a list of `Candidate`s."""
    listed = instances.get(0, instances.len())
    return [Candidate(instances, i, x) for i, x in enumerate(listed)]


# A gate's answers: go on, or leave the decision to the built-in rules and the other hooks.
PROCEED = types.Verdict_Proceed()
DEFER = types.Verdict_Defer()
# The phases a gate is asked in.
BEFORE_GROUP, BEFORE_BATCH, AFTER_BATCH = (
    types.Phase.BEFORE_GROUP, types.Phase.BEFORE_BATCH, types.Phase.AFTER_BATCH)


def abort(reason):
    """A gate's answer that stops the run, for `reason`."""
    return types.Verdict_Abort(reason)


def hold_while(batch, max_checks, retry_seconds, what, blockers):
    """The gate's answer while something is in the way: PROCEED when `blockers` (names) is
    empty, else `hold` naming them ("what: a, b (check 1 of 5)"), aborting at the last check."""
    blockers = list(blockers)
    if not blockers:
        return PROCEED
    return hold(batch, max_checks, retry_seconds, f"{what}: {', '.join(blockers)}")


def abort_if_any(what, blockers):
    """PROCEED when `blockers` (names) is empty, else abort naming them ("what: a, b")."""
    blockers = list(blockers)
    return abort(f"{what}: {', '.join(blockers)}") if blockers else PROCEED


def hold(batch, max_checks, retry_seconds, reason):
    """Wait `retry_seconds` and check again, up to `max_checks` checks of the batch in all, then
    abort (as the Rust SDK's `hold`): `batch.attempt` counts the waits answered so far."""
    check = batch.attempt + 1
    if check < max_checks:
        pause = types.Pause(seconds=retry_seconds, reason=f"{reason} (check {check} of {max_checks})")
        return types.Verdict_Wait(pause)
    checks = max(max_checks, 1)
    return types.Verdict_Abort(f"{reason} after {checks} check{'' if checks == 1 else 's'}")


def percent_of(percent, total, round_up):
    """`percent` % of `total`, rounded up or down, as Kubernetes rounds budgets."""
    if round_up:
        return (percent * total + 99) // 100
    return percent * total // 100


WEEKDAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def minute_of_week(unix_seconds, utc_offset_minutes=0):
    """Minutes since Monday 00:00 (local to the offset): 0 to 10079."""
    minutes = unix_seconds // 60 + utc_offset_minutes
    # 1970-01-01 was a Thursday: three days after a Monday.
    return (minutes + 3 * 1440) % (7 * 1440)


def in_window(now, start, end, utc_offset_minutes=0):
    """Whether `now` (Unix seconds) falls in the weekly window from `start` to `end`, each
    `"mon 22:00"`; a window may wrap past Sunday midnight."""

    def at(text):
        day, clock = text.split()
        hours, minutes = clock.split(":")
        return WEEKDAYS.index(day.lower()[:3]) * 1440 + int(hours) * 60 + int(minutes)

    m, a, b = minute_of_week(now, utc_offset_minutes), at(start), at(end)
    return a <= m < b if a <= b else m >= a or m < b


def in_schedule(now, spans, utc_offset_minutes=0):
    """Whether `now` (Unix seconds) falls in a weekly schedule of `spans` such as
    "mon-fri 09:00-17:00" or "sat,sun 22:00-06:00": days (one, a range, or a list of either),
    then hours; an end not after its start runs past midnight into the next day. A span that
    does not read raises ValueError naming it."""
    at = minute_of_week(now, utc_offset_minutes)
    for span in [spans] if isinstance(spans, str) else spans:
        for start, length in _openings(span):
            if (at - start) % (7 * 1440) < length:
                return True
    return False


def _openings(span):
    def bad(why):
        return ValueError(f'schedule {span!r}: {why} (expected e.g. "mon-fri 09:00-17:00")')

    def day(text):
        if text.strip().lower()[:3] not in WEEKDAYS:
            raise bad(f"invalid weekday {text.strip()!r}")
        return WEEKDAYS.index(text.strip().lower()[:3])

    def clock(text):
        hours, _, minutes = text.strip().partition(":")
        if not (hours.isdigit() and minutes.isdigit()) or int(hours) > 24 or int(minutes) > 59:
            raise bad(f"invalid time {text.strip()!r}: expected HH:MM")
        return int(hours) * 60 + int(minutes)

    days, _, hours = span.strip().partition(" ")
    if "-" not in hours:
        raise bad("hours are FROM-TO")
    start, end = (clock(t) for t in hours.split("-", 1))
    length = end - start if end > start else end + 1440 - start
    openings = []
    for item in days.split(","):
        first, _, last = item.partition("-")
        d, last = day(first), day(last or first)
        while True:
            openings.append((d * 1440 + start, length))
            if d == last:
                break
            d = (d + 1) % 7
    return openings


def today_at(now, clock, utc_offset_minutes=0):
    """The instant (Unix seconds) of `clock` ("18:00") on the day of `now`, days as seen at
    `utc_offset_minutes`: "18:00 today", to compare with when a batch likely ends."""
    offset = utc_offset_minutes * 60
    hours, _, minutes = clock.partition(":")
    return (now + offset) // 86400 * 86400 - offset + int(hours) * 3600 + int(minutes) * 60


def these_last(items, last):
    """`items` with those `last(item)` holds for moved to the end, each part in its order."""
    items = list(items)
    return [i for i in items if not last(i)] + [i for i in items if last(i)]


def oldest_first(instances):
    """Instances (`types.Instance` records) oldest first, as a new list: an unknown creation
    time sorts first, as the oldest (a node that never registered); names break ties."""
    return sorted(instances, key=lambda i: (i.created is not None, i.created or 0, i.name))


def estimates():
    """How long the batch at hand and the rest of the run likely take, as the plugin estimates
    them (contract 0.3.5): `batch` and `remaining` are each None or have `seconds`,
    `p90_seconds` and `basis` ("history of 3 runs", "defaults: no history", ...). `batch` is
    None for a call about no batch (a selection, a gate before the group or after a batch)."""
    return host.estimates()


def batch_ends(now, timing=None):
    """When the batch at hand ends if it starts at `now` (Unix seconds), cautiously (at its
    90th percentile); None when the call is about no batch. `timing`: `estimates()`."""
    batch = (timing if timing is not None else host.estimates()).batch
    return None if batch is None else now + batch.p90_seconds


def run_ends(now, timing=None):
    """When the rest of the run ends if it goes on from `now` (Unix seconds), cautiously (at its
    90th percentile; the batch at hand included); None when the host has no estimate, which a
    plan or a run always has for select, batch and gate calls. `timing`: `estimates()`."""
    remaining = (timing if timing is not None else host.estimates()).remaining
    return None if remaining is None else now + remaining.p90_seconds


def day_and_time(unix_seconds, utc_offset_minutes=0):
    """An instant as a reason says it: its weekday and time of day, as seen at the offset
    ("fri 18:05"), which no other instant of the week shares."""
    at = minute_of_week(unix_seconds, utc_offset_minutes)
    return f"{WEEKDAYS[at // 1440]} {at % 1440 // 60:02}:{at % 60:02}"


def others_disrupting():
    """The nodes of the group the call is about that other tools are taking out now (contract
    0.3.7): each has `node` and `by` ("karpenter", "cluster-autoscaler", "kured (...)", ...), as
    the run counts them against the group's budget. Empty when the policy ignores them, when no
    one disrupts any, and in calls about no node group."""
    return host.others_disrupting()


def disrupted_by(node, others=None):
    """Who else is taking `node` out now, or None. `others`: `others_disrupting()`."""
    for d in others if others is not None else host.others_disrupting():
        if d.node == node:
            return d.by
    return None


def list_objects(api_version, kind, namespace=None, selector=None):
    """Objects the policy's contextResources grant, as dicts (a refused read fails the call)."""
    return json.loads(host.list_objects(api_version, kind, namespace, selector))


@dataclass
class Pod:
    """A Pod, with the fields policies need."""

    namespace: str
    name: str
    phase: str = ""
    ready: bool = False
    node: str = ""
    labels: dict = field(default_factory=dict)

    @staticmethod
    def of(obj):
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        conditions = status.get("conditions") or []
        return Pod(
            namespace=meta.get("namespace") or "",
            name=meta.get("name") or "",
            phase=status.get("phase") or "",
            ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
            node=(obj.get("spec") or {}).get("nodeName") or "",
            labels=meta.get("labels") or {},
        )

    @property
    def finished(self):
        return self.phase in ("Succeeded", "Failed")

    @property
    def key(self):
        return f"{self.namespace}/{self.name}"


def pods(namespace=None, selector=None):
    """Pods (`v1`) in `namespace` (None: all) matching the label `selector`, as `Pod`s: `node`
    is the node it runs on ("" while pending)."""
    return [Pod.of(o) for o in list_objects("v1", "Pod", namespace, selector)]


def nodes_running(namespace=None, selector=None):
    """The names of the nodes running pods in `namespace` (None: all) that match the label
    `selector` (finished pods left out), as a set."""
    return {p.node for p in pods(namespace, selector) if p.node and not p.finished}


@dataclass
class Workload:
    """A Deployment, StatefulSet, ReplicaSet or DaemonSet: how many pods it wants and has."""

    kind: str
    namespace: str
    name: str
    desired: int
    available: int

    @staticmethod
    def of(kind, obj):
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        if kind == "DaemonSet":
            desired = status.get("desiredNumberScheduled") or 0
            available = status.get("numberAvailable") or 0
        else:
            replicas = spec.get("replicas")
            desired = 1 if replicas is None else replicas
            available = status.get("availableReplicas")
            if available is None:
                available = status.get("readyReplicas") or 0
        return Workload(kind, meta.get("namespace") or "", meta.get("name") or "", desired, available)

    @property
    def short(self):
        """Fewer available pods than it wants (a bool)."""
        return self.available < self.desired

    @property
    def key(self):
        return f"{self.namespace}/{self.name}"


@dataclass
class PodDisruptionBudget:
    """A PodDisruptionBudget as the disruption controller last computed it (all zero until it
    has: a new budget allows no disruption)."""

    namespace: str
    name: str
    disruptions_allowed: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0

    @staticmethod
    def of(obj):
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        count = lambda key: status.get(key) or 0
        return PodDisruptionBudget(meta.get("namespace") or "", meta.get("name") or "",
                                   count("disruptionsAllowed"), count("currentHealthy"),
                                   count("desiredHealthy"), count("expectedPods"))

    @property
    def blocks(self):
        """It allows no eviction now."""
        return self.disruptions_allowed <= 0

    @property
    def key(self):
        return f"{self.namespace}/{self.name}"


def pod_disruption_budgets(namespace=None, selector=None):
    """PodDisruptionBudgets (`policy/v1`), as `PodDisruptionBudget`s."""
    objects = list_objects("policy/v1", "PodDisruptionBudget", namespace, selector)
    return [PodDisruptionBudget.of(o) for o in objects]


def workloads(kind, namespace=None, selector=None):
    """Deployments, StatefulSets, ReplicaSets or DaemonSets (`apps/v1`), as `Workload`s."""
    return [Workload.of(kind, o) for o in list_objects("apps/v1", kind, namespace, selector)]
