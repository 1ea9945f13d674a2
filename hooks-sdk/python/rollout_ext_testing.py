"""A stand-in host for unit tests of a Python hook, run outside a component (unittest or pytest).

Import this module before the hook's own: it stands in for the bindings the hook imports
(`wit_world`, `componentize_py_types`), each WIT record a plain record of its fields, and serves
the host's calls from `cluster`, which each test sets. The builders make a call's arguments as
the Rust SDK's `testing` module does, and `answer` reads a hook's answer in the words of
`kubectl rollout-ext hooks run`:

    import rollout_ext_testing as t
    import app

    t.cluster.reset(t.pod("payments", "api-0", ready=False))
    verdict = app.Gates().check(t.context(), t.types.Phase.AFTER_BATCH, t.batch(["n1"]), t.healthy())
    assert t.answer(verdict) == {"answer": "wait", "seconds": 20, "reason": "..."}
"""

import json
import sys
import types as pytypes
from pathlib import Path


class Record:
    """Any generated WIT type: the arguments it was built with, the keyword ones also as
    fields (an enum's cases are its upper-case attributes)."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        self.__dict__.update(kwargs)

    def __eq__(self, other):
        return type(self) is type(other) and (self.args, self.kwargs) == (other.args, other.kwargs)

    def __repr__(self):
        return f"{type(self).__name__}{self.args}{self.kwargs}"


class _Enum(type):
    def __getattr__(cls, case):
        if case.startswith("__"):
            raise AttributeError(case)
        return f"{cls.__name__}.{case}"


def _record_module(name):
    module = pytypes.ModuleType(name)
    made = {}

    def make(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return made.setdefault(attr, _Enum(attr, (Record,), {}))

    module.__getattr__ = make
    return module


class Err(Exception):
    """`componentize_py_types.Err`: the `err` a method answers by raising it."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


class FakeCluster:
    """What the stand-in host answers: the objects `list_objects` serves (as the policy's
    contextResources would let through), the estimates and other disruptors it tells, and the
    hook's log."""

    def __init__(self):
        self.reset()

    def reset(self, *objects, estimates=None, others=()):
        self.objects = list(objects)
        self.estimates = estimates or types.Timing(batch=None, remaining=None)
        self.others = [types.Disruption(node=n, by=b) for n, b in others]
        self.asked, self.logs = [], []
        return self

    def list(self, api_version, kind, namespace, selector):
        self.asked.append((api_version, kind, namespace, selector))
        terms = _selector_terms(selector or "")
        meta = lambda o: o.get("metadata") or {}
        wanted = lambda o: (o.get("apiVersion"), o.get("kind")) == (api_version, kind) and (
            namespace is None or meta(o).get("namespace") == namespace
        ) and all(test(meta(o).get("labels") or {}) for test in terms)
        return json.dumps([o for o in self.objects if wanted(o)])


def _selector_terms(text):
    """A label selector's terms as tests of a labels dict: key=value, key==value, key!=value,
    key and !key, comma-separated (as the Rust SDK's fake cluster understands them); any other
    term raises Err, as the host refuses a selector it cannot read."""
    terms = []
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        if "!=" in term:
            key, value = (x.strip() for x in term.split("!=", 1))
            terms.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = (x.strip() for x in term.replace("==", "=", 1).split("=", 1))
            terms.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            key = term[1:].strip()
            terms.append(lambda labels, k=key: k not in labels)
        else:
            key = term
            terms.append(lambda labels, k=key: k in labels)
        if not key or any(c in key for c in " ()!="):
            raise Err(f"label selector term {term!r} is not one the stand-in host understands "
                      "(key=value, key!=value, key, !key)")
    return terms


types = _record_module("wit_world.imports.types")
cluster = FakeCluster()

_host = pytypes.ModuleType("wit_world.imports.host")
_host.Level = _Enum("Level", (), {})
_host.list_objects = lambda *args: cluster.list(*args)
_host.estimates = lambda: cluster.estimates
_host.others_disrupting = lambda: cluster.others
_host.log = lambda level, message: cluster.logs.append((level, message))


def _not_served(*_):
    raise Err("metrics are not served by the stand-in host: answer them in the test")


_host.query_metrics = _host.query_metrics_range = _not_served
_imports = pytypes.ModuleType("wit_world.imports")
_imports.host, _imports.types = _host, types
_exports = pytypes.ModuleType("wit_world.exports")
for _base in ("Metadata", "Selection", "Batching", "Gates"):
    setattr(_exports, _base, type(_base, (), {}))
_world = pytypes.ModuleType("wit_world")
_world.exports, _world.imports = _exports, _imports
_runtime = pytypes.ModuleType("componentize_py_types")
_runtime.Err = Err
sys.modules.update({
    "componentize_py_types": _runtime,
    "wit_world": _world,
    "wit_world.exports": _exports,
    "wit_world.imports": _imports,
    "wit_world.imports.host": _host,
    "wit_world.imports.types": types,
})
# The SDK's helpers sit beside this module.
sys.path.insert(0, str(Path(__file__).parent))


def context(now=1_795_780_800, config=None, dry_run=True, hook_name="hook"):
    """The context of a call at `now` (Unix seconds; a Friday noon by default), with `config`
    (a dict) as the policy file would give it."""
    return types.Context(now=now, run_id="test", dry_run=dry_run, hook_name=hook_name,
                         config=json.dumps(config or {}))


class _Node(Record):
    """A node instance, with the labels, annotations and taints the host keeps aside."""


def node(name, zone=None, *, pods=0, pods_not_ready=0, labels=None, annotations=None,
         taints=(), created=None, ready=True, unschedulable=False, up_to_date=False,
         reason="outdated", group="nodes", kubelet_version=None):
    """A node of `group`: outdated and in the built-in choice (`reason`) unless told."""
    record = types.Instance(kind="InstanceKind.NODE", name=name, group=group, role="Role.NODE",
                            zone=zone, ready=ready, unschedulable=unschedulable, created=created,
                            kubelet_version=kubelet_version, pods=pods,
                            pods_not_ready=pods_not_ready, up_to_date=up_to_date, reason=reason)
    record.extra = {"labels": dict(labels or {}), "annotations": dict(annotations or {}),
                    "taints": [types.Taint(key=k, value=v, effect=e) for k, v, e in taints]}
    return record


class Instances:
    """The `instances` resource a selection's candidates and a batch's pending come in."""

    def __init__(self, nodes):
        self.nodes = list(nodes)

    def len(self):
        return len(self.nodes)

    def get(self, start, count):
        return self.nodes[start:start + count]

    def label(self, index, key):
        return self.nodes[index].extra["labels"].get(key)

    def annotation(self, index, key):
        return self.nodes[index].extra["annotations"].get(key)

    def labels(self, index):
        return [types.KeyValue(key=k, value=v) for k, v in self.nodes[index].extra["labels"].items()]

    def annotations(self, index):
        items = self.nodes[index].extra["annotations"].items()
        return [types.KeyValue(key=k, value=v) for k, v in items]

    def taints(self, index):
        return list(self.nodes[index].extra["taints"])


def candidates(nodes):
    """`nodes` as a short-form `select` or `next_batch` is given them (its `candidates` or
    `pending`): a list of the SDK's `Candidate`s."""
    import rollout_ext_hooks

    return rollout_ext_hooks.candidates_of(Instances(nodes))


def chosen(nodes):
    """Those of `nodes` in the current choice (with a reason), as a short-form `select` is
    given its `chosen`."""
    return [c for c in candidates(nodes) if c.reason is not None]


def exports(app):
    """What the component exports for the hook module `app`, as the build makes them: its
    `Metadata`, `Selection`, `Batching` and `Gates` classes (the SDK's deferring ones for the
    points it does not serve), for a call as the plugin makes it:
    `t.exports(app).Gates().check(t.context(), t.types.Phase.BEFORE_BATCH, ...)`."""
    import rollout_ext_hooks

    made = rollout_ext_hooks.hook_exports(app)
    return pytypes.SimpleNamespace(**dict(zip(("Metadata", "Selection", "Batching", "Gates"), made)))


def group(nodes, max_surge=0, max_unavailable=1, name="nodes"):
    """The group of `nodes`, with its budget."""
    nodes = list(nodes)
    chosen = sum(1 for n in nodes if n.reason is not None)
    return types.Group(name=name, role="Role.NODE", size=len(nodes),
                       up_to_date=sum(1 for n in nodes if n.up_to_date), selected=chosen,
                       max_surge=max_surge, max_unavailable=max_unavailable)


def progress(pending, max_batch=1, batches_done=0, updated=0):
    """Where the update of the group of `pending` stands when the next batch is sized."""
    return types.Progress(group=group(pending, max_unavailable=max_batch),
                          batches_done=batches_done, updated=updated, max_batch=max_batch)


def batch(instances, attempt=0, index=0, canary=False):
    """The batch a gate is asked about; `attempt` the waits answered so far."""
    return types.Batch(index=index, instances=list(instances), canary=canary, attempt=attempt)


def estimate(seconds, p90_seconds=None, basis="test"):
    """A duration estimate, for `cluster.reset(estimates=t.timing(remaining=t.estimate(...)))`."""
    return types.DurationEstimate(seconds=seconds, p90_seconds=p90_seconds or seconds, basis=basis)


def timing(batch=None, remaining=None):
    """What `estimates()` answers: the batch at hand's estimate and the rest of the run's."""
    return types.Timing(batch=batch, remaining=remaining)


def healthy(nodes=3, pods=10):
    """A validation summary with nothing wrong."""
    return types.ValidationSummary(nodes_total=nodes, nodes_not_ready=0, nodes_unschedulable=0,
                                   pods_total=pods, pods_not_ready=0, system_pods_not_ready=0,
                                   budgets=[], failures=[])


def pod(namespace, name, *, ready=True, node="", labels=None, phase="Running"):
    """A Pod object, as `list_objects` serves it."""
    status = "True" if ready else "False"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
            "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": status}]}}


def answer(value):
    """A hook's answer in the words of `hooks run`: {"answer": "choose", "order": [...]}, ...
    An `Err` raised is {"error": why}."""
    kind = type(value).__name__
    if kind in ("Selection_Defer", "BatchSize_Defer", "Verdict_Defer"):
        return {"answer": "defer"}
    if kind == "Selection_Choose":
        return {"answer": "choose",
                "order": [{"name": c.name, "reason": c.reason} for c in value.args[0]]}
    if kind == "BatchSize_Size":
        return {"answer": "size", "count": value.args[0].count, "reason": value.args[0].reason}
    if kind in ("BatchSize_Pause", "Verdict_Wait"):
        word = "pause" if kind == "BatchSize_Pause" else "wait"
        return {"answer": word, "seconds": value.args[0].seconds, "reason": value.args[0].reason}
    if kind == "Verdict_Proceed":
        return {"answer": "proceed"}
    if kind == "Verdict_Abort":
        return {"answer": "abort", "reason": value.args[0]}
    raise TypeError(f"not an answer: {value!r}")
