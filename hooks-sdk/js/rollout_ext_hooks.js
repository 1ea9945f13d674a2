// Helpers for rollout-ext policy hooks written in JavaScript. hooks-sdk/js/build.sh puts this
// module beside the hook's own: `import { … } from './rollout_ext_hooks.js'`.
//
// What the Rust SDK gives a hook, for JavaScript: the short form (`name` and a function per point
// served, taking apart the arguments it reads; see `hookExports`), exports whose every function
// defers (a hook exports only the points it serves: the build exports a deferring one for each
// point left out, and declares the points served), `describe`, `DEFER`, `PROCEED`, `abort`, `holdWhile` and `abortIfAny` (answers), `hold` (wait for N checks, then
// abort), `candidatesOf`, `chooseBy`, `chooseByRules` and `countBy` (order the candidates by
// several rules, with reasons), week windows,
// `percentOf`, the plugin's estimates (`estimates`, `batchEnds`), what other tools are taking out
// (`othersDisrupting`, `disruptedBy`), and typed views of the objects hooks read most, with the
// API's defaults.
//
// WIT values as the bindings give them: variants are `{ tag, val }`, an option is `undefined`
// when none, s64 and u64 numbers are BigInts (`ctx.now`, `created`), u32 ones Numbers.

import {
  estimates as hostEstimates,
  listObjects as hostListObjects,
  othersDisrupting as hostOthersDisrupting,
} from 'rollout-ext:policy/host@0.3.7';

// The contract this module is built against: the package version of hooks-sdk/wit/policy.wit.
export const WIT_VERSION = '0.3.7';

export const DEFER = { tag: 'defer' };
export const PROCEED = { tag: 'proceed' };

const POINTS = ['select', 'batch', 'gate'];

// The points the hook's exports serve, found by the build's entry module (`hookExports`).
let served = null;

/**
 * The module's `describe` answer: its name and the points ('select', 'batch', 'gate') it
 * serves; without `points`, those its exports serve.
 */
export function describe(name, points = served ?? []) {
  for (const p of points) {
    if (!POINTS.includes(p)) {
      throw new Error(`describe: unknown point ${JSON.stringify(p)} (one of ${POINTS.join(', ')})`);
    }
  }
  return { name, sdkVersion: WIT_VERSION, witVersion: WIT_VERSION, points };
}

/** The hook's config as an object; throws the string the plugin shows when it is not one. */
export function configObject(config) {
  let value;
  try {
    value = JSON.parse(config);
  } catch (e) {
    // A thrown string becomes the `err`; a thrown Error would trap instead.
    throw `config is not JSON: ${e.message}`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw 'config must be an object';
  }
  return value;
}

/**
 * A `metadata` export: the hook is `name`, serving `points` (without them, the points its
 * exports serve); any JSON object is accepted as config.
 */
export function anyConfig(name, points = undefined) {
  return {
    describe: () => describe(name, points),
    validateConfig: (config) => {
      configObject(config);
    },
  };
}

/** Exports that defer at every point: spread one and override what you serve. */
export const deferSelection = { select: () => DEFER };
export const deferBatching = { nextBatch: () => DEFER };
export const deferGates = { check: () => DEFER };

// Each point: the export that serves it, its function, and the SDK's deferring export.
const POINT_EXPORTS = [
  ['select', 'selection', 'select', deferSelection],
  ['batch', 'batching', 'nextBatch', deferBatching],
  ['gate', 'gates', 'check', deferGates],
];

// The short form: exported functions, each a point or a gate asked in one phase only, given one
// object with the call's arguments, which it takes apart: `select({ candidates })`.
const FUNCTIONS = {
  select: 'select',
  nextBatch: 'batch',
  check: 'gate',
  beforeGroup: 'gate',
  beforeBatch: 'gate',
  afterBatch: 'gate',
};
const PHASE_FUNCTIONS = { 'before-group': 'beforeGroup', 'before-batch': 'beforeBatch', 'after-batch': 'afterBatch' };

// What each call offers a short-form function, by name.
const OFFERED = {
  select: ['ctx', 'config', 'now', 'group', 'candidates', 'chosen'],
  nextBatch: ['ctx', 'config', 'now', 'group', 'progress', 'pending'],
  check: ['ctx', 'config', 'now', 'phase', 'batch', 'summary'],
};
const offeredTo = (fn) => OFFERED[fn] ?? OFFERED.check.filter((n) => n !== 'phase');

/**
 * The names a short-form function takes apart from its one argument (`({ batch, summary })`),
 * read from its source; throws a build error when it takes its arguments otherwise or names one
 * no call offers.
 */
function namesTaken(fn, name, file) {
  const offered = offeredTo(name);
  const wrong = (why) =>
    new Error(
      `rollout-ext-build: ${file}'s ${name} ${why}: take those it reads from its one argument, ${name}({ ${offered.join(', ')} }), any of them in any order`,
    );
  const source = Function.prototype.toString.call(fn);
  const open = source.indexOf('(');
  if (open < 0 || /^\s*(async\s+)?\w+\s*=>/.test(source)) {
    throw wrong('takes its arguments otherwise');
  }
  let text = source.slice(open + 1);
  if (/^\s*\)/.test(text)) {
    return [];
  }
  if (!/^\s*\{/.test(text)) {
    throw wrong(`takes ${text.split(/[,)]/)[0].trim()}`);
  }
  // The pattern's top-level names: what nested brackets hold (patterns, defaults' calls) is dropped.
  text = text.slice(text.indexOf('{') + 1);
  let depth = 0;
  let top = '';
  for (const ch of text) {
    if (ch === '}' && depth === 0) {
      break;
    }
    depth += '{[('.includes(ch) ? 1 : ')]}'.includes(ch) ? -1 : 0;
    top += depth === 0 && !'{}[]()'.includes(ch) ? ch : '';
  }
  const names = top.split(',').map((part) => part.split(/[:=]/)[0].trim()).filter((n) => n !== '');
  for (const n of names) {
    if (!offered.includes(n)) {
      throw wrong(`takes ${n}, which is none of its arguments`);
    }
  }
  return names;
}

/** The call of the module's short-form function `name`, its arguments made when taken. */
function shortFormCall(app, name, file) {
  namesTaken(app[name], name, file);
  return (ctx, own) => {
    const args = {};
    const made = { ctx: () => ctx, config: () => configObject(ctx.config), now: () => Number(ctx.now), ...own };
    for (const [key, make] of Object.entries(made)) {
      Object.defineProperty(args, key, { get: make, enumerable: true });
    }
    const answer = app[name](args);
    if (answer === undefined || answer === null) {
      throw `${file}'s ${name} answered nothing (it returned ${answer}): return its answer`;
    }
    return answer;
  };
}

/** The selection, batching and gates exports made of the module's short-form functions. */
function shortFormExports(app, file) {
  const found = Object.keys(FUNCTIONS).filter((f) => typeof app[f] === 'function');
  for (const [point, name] of POINT_EXPORTS) {
    const mine = found.filter((f) => FUNCTIONS[f] === point);
    if (mine.length > 0 && app[name] !== undefined) {
      throw new Error(`rollout-ext-build: ${file} serves point "${point}" twice, by export ${name} and by ${mine[0]}: keep one`);
    }
  }
  const phases = found.filter((f) => Object.values(PHASE_FUNCTIONS).includes(f));
  if (found.includes('check') && phases.length > 0) {
    throw new Error(
      `rollout-ext-build: ${file} has check and a phase's gate (${phases.join(', ')}): check is asked in every phase; keep it or the phase functions`,
    );
  }
  const calls = Object.fromEntries(found.map((f) => [f, shortFormCall(app, f, file)]));
  const made = {};
  if (calls.select) {
    made.selection = {
      select(ctx, group, candidates) {
        // Read from the host once, whether the function takes both or one.
        let listed;
        const everyone = () => (listed ??= candidatesOf(candidates));
        return calls.select(ctx, {
          group: () => group,
          candidates: everyone,
          // The current choice: the candidates with a reason.
          chosen: () => everyone().filter((c) => c.reason !== undefined),
        });
      },
    };
  }
  if (calls.nextBatch) {
    made.batching = {
      nextBatch: (ctx, progress, pending) =>
        calls.nextBatch(ctx, {
          group: () => progress.group,
          progress: () => progress,
          pending: () => candidatesOf(pending),
        }),
    };
  }
  if (calls.check || phases.length > 0) {
    made.gates = {
      check(ctx, phase, batch, summary) {
        const call = calls.check ?? calls[PHASE_FUNCTIONS[phase]];
        return call === undefined
          ? DEFER
          : call(ctx, { phase: () => phase, batch: () => batch, summary: () => summary });
      },
    };
  }
  // What serves each point, in the words of an error.
  made.servedBy = {};
  for (const [point] of POINT_EXPORTS) {
    made.servedBy[point] = found.filter((f) => FUNCTIONS[f] === point).join(' and ');
  }
  if (typeof app.name === 'string' && app.metadata === undefined) {
    made.metadata = anyConfig(app.name);
  }
  return made;
}

/**
 * What the build's entry module exports for the hook module `app` (its namespace; `file` names
 * it): its metadata, checked so that `describe` declares every point an export serves (a point
 * served but not declared would never be asked, silently), and its selection, batching and
 * gates, the SDK's deferring export for each one left out. A module in the short form (`name`
 * and functions `select`, `nextBatch`, `check` or a phase's gate `beforeGroup`, `beforeBatch`,
 * `afterBatch`) has its exports made here.
 */
export function hookExports(app, file) {
  const short = shortFormExports(app, file);
  const metadata = app.metadata ?? short.metadata;
  if (metadata === undefined) {
    throw new Error(
      `rollout-ext-build: ${file} exports no name and no metadata: every hook has one (export const name = 'my-policy')`,
    );
  }
  const hook = {};
  const serving = [];
  const by = {};
  for (const [point, name, fn, defer] of POINT_EXPORTS) {
    const exported = app[name] ?? short[name] ?? defer;
    if (exported[fn] !== defer[fn]) {
      serving.push(point);
      by[point] = exported === app[name] ? `export ${name}` : short.servedBy[point];
    }
    hook[name] = exported;
  }
  served = serving;
  hook.metadata = {
    describe() {
      const info = metadata.describe();
      for (const point of serving) {
        if (!info.points.includes(point)) {
          throw new Error(
            `describe: ${file}'s ${by[point]} serves point "${point}", which describe leaves out of its points: declare it, or leave the points out (anyConfig(name) declares those served)`,
          );
        }
      }
      return info;
    },
    validateConfig: (config) => metadata.validateConfig(config),
  };
  return hook;
}

/** A batch of `count` instances, with why. */
export function size(count, reason) {
  return { tag: 'size', val: { count, reason } };
}

/**
 * A batch of `count`, or of as many as the budget allows now (`progress.maxBatch`) when that is
 * fewer, the reason then saying so: 'weekend (2 allowed now)'. A size over it would be an
 * invalid answer.
 */
export function atMost(count, progress, reason) {
  return count > progress.maxBatch
    ? size(progress.maxBatch, `${reason} (${progress.maxBatch} allowed now)`)
    : size(count, reason);
}

/** A selection of `[name, reason]` pairs, in update order (an empty one updates none). */
export function choose(pairs) {
  return { tag: 'choose', val: [...pairs].map(([name, reason]) => ({ name, reason, force: false })) };
}

/**
 * The candidates of a selection (its `candidates` argument) as an array: each the Instance's
 * fields (`name`, `zone`, `created`, `pods`, `upToDate`, `reason`, …), its `index`, and
 * `label(key)`, `annotation(key)`, `labels()`, `annotations()`, `taints()`, read from the host
 * when asked (one call each).
 */
export function candidatesOf(instances) {
  return instances.get(0, instances.len()).map((instance, index) => ({
    ...instance,
    // '' when it has none, as the Rust SDK's zone().
    zone: instance.zone ?? '',
    index,
    label: (key) => instances.label(index, key),
    annotation: (key) => instances.annotation(index, key),
    labels: () => Object.fromEntries(instances.labels(index).map((kv) => [kv.key, kv.value])),
    annotations: () => Object.fromEntries(instances.annotations(index).map((kv) => [kv.key, kv.value])),
    taints: () => instances.taints(index),
    hasTaint: (key) => instances.taints(index).some((t) => t.key === key),
  }));
}

/** Orders two key parts: undefined and null first, false before true, numbers and BigInts by value. */
function compareParts(a, b) {
  const none = (v) => v === undefined || v === null;
  if (none(a) || none(b)) {
    return none(a) === none(b) ? 0 : none(a) ? -1 : 1;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A selection of `items` ordered by `key(item)`, smallest first, each with the reason
 * `reason(item)` gives. Several rules are one array key, the first deciding (false before true,
 * undefined first; negate a count for largest first); ties keep the order they came in. `key`
 * is called once per item, so a label read in it is one host call each.
 */
export function chooseBy(items, key, reason) {
  const keyed = [...items].map((item) => [[key(item)].flat(), item]);
  keyed.sort(([a], [b]) => compareKeys(a, b));
  return choose(keyed.map(([, item]) => [item.name, reason(item)]));
}

/** Orders two keys part by part, the first part deciding. */
function compareKeys(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const order = compareParts(a[i], b[i]);
    if (order !== 0) {
      return order;
    }
  }
  return 0;
}

/**
 * A selection of `items` ordered by `rules`, each `[name, key]` or `[name, key, detail]`: the
 * first deciding, each later one breaking the ties of those before it (smallest key first:
 * false before true, undefined first; negate a count for largest first; ties on every rule keep
 * the items' order). Each choice's reason names the rule that puts it before the next one (the
 * last says which one it follows and by what rule), with `detail(item)` when the rule has one;
 * candidates tied on every rule say so, and a lone one is "the only candidate". Keys are read
 * once per item and rule.
 */
export function chooseByRules(items, rules) {
  const keyed = [...items].map((item) => [rules.map(([, key]) => key(item)), item]);
  keyed.sort(([a], [b]) => compareKeys(a, b));
  return choose(keyed.map(([keys, item], at) => {
    if (keyed.length === 1) {
      return [item.name, 'the only candidate'];
    }
    const last = at + 1 === keyed.length;
    const [other, otherItem] = last ? keyed[at - 1] : keyed[at + 1];
    const r = rules.findIndex((_, i) => compareParts(keys[i], other[i]) !== 0);
    if (r < 0) {
      return [item.name, `tied with ${otherItem.name} on every rule`];
    }
    const [name, , detail] = rules[r];
    const said = detail ? `${name}: ${detail(item)}` : name;
    // The last is placed after the one before it, not before anything.
    return [item.name, last ? `after ${otherItem.name} by ${said}` : said];
  }));
}

/** How many of `items` there are of each `key(item)`, as an object: candidates per zone. */
export function countBy(items, key) {
  const counts = {};
  for (const item of items) {
    const k = key(item);
    counts[k] = (counts[k] ?? 0) + 1;
  }
  return counts;
}

/** A gate's answer that stops the run, for `reason`. */
export function abort(reason) {
  return { tag: 'abort', val: reason };
}

/**
 * The gate's answer while something is in the way: PROCEED when `blockers` (names) is empty,
 * else `hold` naming them ('what: a, b (check 1 of 5)'), aborting at the last check.
 */
export function holdWhile(batch, maxChecks, retrySeconds, what, blockers) {
  const names = [...blockers];
  return names.length === 0 ? PROCEED : hold(batch, maxChecks, retrySeconds, `${what}: ${names.join(', ')}`);
}

/** PROCEED when `blockers` (names) is empty, else abort naming them ('what: a, b'). */
export function abortIfAny(what, blockers) {
  const names = [...blockers];
  return names.length === 0 ? PROCEED : abort(`${what}: ${names.join(', ')}`);
}

/**
 * Wait `retrySeconds` and check again, up to `maxChecks` checks of the batch in all, then abort
 * (as the Rust SDK's `hold`): `batch.attempt` counts the waits answered so far.
 */
export function hold(batch, maxChecks, retrySeconds, reason) {
  const check = batch.attempt + 1;
  if (check < maxChecks) {
    return { tag: 'wait', val: { seconds: retrySeconds, reason: `${reason} (check ${check} of ${maxChecks})` } };
  }
  const checks = Math.max(maxChecks, 1);
  return { tag: 'abort', val: `${reason} after ${checks} check${checks === 1 ? '' : 's'}` };
}

/** `percent` % of `total`, rounded up or down, as Kubernetes rounds budgets. */
export function percentOf(percent, total, roundUp) {
  return roundUp ? Math.floor((percent * total + 99) / 100) : Math.floor((percent * total) / 100);
}

const WEEKDAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'];

/** Minutes since Monday 00:00 (local to the offset): 0 to 10079. `unixSeconds`: Number or BigInt. */
export function minuteOfWeek(unixSeconds, utcOffsetMinutes = 0) {
  const minutes = Math.floor(Number(unixSeconds) / 60) + utcOffsetMinutes;
  // 1970-01-01 was a Thursday: three days after a Monday.
  const week = 7 * 1440;
  return (((minutes + 3 * 1440) % week) + week) % week;
}

/**
 * Whether `now` (Unix seconds, Number or BigInt) falls in the weekly window from `start` to
 * `end`, each 'mon 22:00'; a window may wrap past Sunday midnight.
 */
export function inWindow(now, start, end, utcOffsetMinutes = 0) {
  const at = (text) => {
    const [day, clock] = text.trim().split(/\s+/);
    const [hours, minutes] = clock.split(':');
    const index = WEEKDAYS.indexOf(day.toLowerCase().slice(0, 3));
    if (index < 0) {
      throw new Error(`inWindow: unknown day in ${JSON.stringify(text)}`);
    }
    return index * 1440 + Number(hours) * 60 + Number(minutes);
  };
  const m = minuteOfWeek(now, utcOffsetMinutes);
  const [a, b] = [at(start), at(end)];
  return a <= b ? a <= m && m < b : m >= a || m < b;
}

/**
 * Whether `now` (Unix seconds, Number or BigInt) falls in a weekly schedule of `spans` (one or
 * a list) such as 'mon-fri 09:00-17:00' or 'sat,sun 22:00-06:00': days (one, a range, or a
 * list of either), then hours; an end not after its start runs past midnight into the next
 * day. A span that does not read throws an Error naming it.
 */
export function inSchedule(now, spans, utcOffsetMinutes = 0) {
  const at = minuteOfWeek(now, utcOffsetMinutes);
  for (const span of typeof spans === 'string' ? [spans] : spans) {
    for (const [start, length] of openings(span)) {
      if ((((at - start) % (7 * 1440)) + 7 * 1440) % (7 * 1440) < length) {
        return true;
      }
    }
  }
  return false;
}

function openings(span) {
  const bad = (why) => new Error(`schedule ${JSON.stringify(span)}: ${why} (expected e.g. "mon-fri 09:00-17:00")`);
  const day = (text) => {
    const index = WEEKDAYS.indexOf(text.trim().toLowerCase().slice(0, 3));
    if (index < 0) {
      throw bad(`invalid weekday ${JSON.stringify(text.trim())}`);
    }
    return index;
  };
  const clock = (text) => {
    const match = /^(\d{1,2}):(\d{2})$/.exec(text.trim());
    if (!match || Number(match[1]) > 24 || Number(match[2]) > 59) {
      throw bad(`invalid time ${JSON.stringify(text.trim())}: expected HH:MM`);
    }
    return Number(match[1]) * 60 + Number(match[2]);
  };
  const space = span.trim().indexOf(' ');
  const [days, hours] = space < 0 ? [span, ''] : [span.trim().slice(0, space), span.trim().slice(space + 1)];
  const dash = hours.indexOf('-');
  if (dash < 0) {
    throw bad('hours are FROM-TO');
  }
  const [start, end] = [clock(hours.slice(0, dash)), clock(hours.slice(dash + 1))];
  const length = end > start ? end - start : end + 1440 - start;
  const out = [];
  for (const item of days.split(',')) {
    const [first, last = first] = item.split('-');
    let d = day(first);
    const stop = day(last);
    for (;;) {
      out.push([d * 1440 + start, length]);
      if (d === stop) {
        break;
      }
      d = (d + 1) % 7;
    }
  }
  return out;
}

/**
 * The instant (Unix seconds, a BigInt when `now` is one) of `clock` ('18:00') on the day of
 * `now`, days as seen at `utcOffsetMinutes`: "18:00 today", to compare with `batchEnds`.
 */
export function todayAt(now, clock, utcOffsetMinutes = 0) {
  const offset = utcOffsetMinutes * 60;
  const [hours, minutes] = clock.split(':').map(Number);
  const seconds = Number(now) + offset;
  const at = Math.floor(seconds / 86400) * 86400 - offset + hours * 3600 + minutes * 60;
  return typeof now === 'bigint' ? BigInt(at) : at;
}

/** `items` with those `last(item)` holds for moved to the end, each part in its order. */
export function theseLast(items, last) {
  const all = [...items];
  return [...all.filter((i) => !last(i)), ...all.filter((i) => last(i))];
}

/**
 * How long the batch at hand and the rest of the run likely take, as the plugin estimates them
 * (contract 0.3.5): `{ batch, remaining }`, each `undefined` or `{ seconds, p90Seconds, basis }`
 * (seconds as BigInts). `batch` is undefined for a call about no batch (a selection, a gate
 * before the group or after a batch).
 */
export function estimates() {
  return hostEstimates();
}

/**
 * When the batch at hand ends if it starts at `now` (Unix seconds, a Number or a BigInt,
 * and the answer the same), cautiously (at its 90th percentile); undefined when the call is about no batch.
 */
export function batchEnds(now, timing = hostEstimates()) {
  return timing.batch === undefined ? undefined : later(now, timing.batch.p90Seconds);
}

/**
 * When the rest of the run ends if it goes on from `now` (Unix seconds, a Number or a BigInt,
 * and the answer the same), cautiously (at its 90th percentile; the batch at hand included);
 * undefined when the host has no estimate, which a plan or a run always has for select, batch
 * and gate calls.
 */
export function runEnds(now, timing = hostEstimates()) {
  return timing.remaining === undefined ? undefined : later(now, timing.remaining.p90Seconds);
}

/** `now` plus `seconds` (a BigInt), in `now`'s own type. */
function later(now, seconds) {
  return typeof now === 'bigint' ? now + BigInt(seconds) : now + Number(seconds);
}

/**
 * An instant as a reason says it: its weekday and time of day, as seen at the offset
 * ('fri 18:05'), which no other instant of the week shares.
 */
export function dayAndTime(unixSeconds, utcOffsetMinutes = 0) {
  const at = minuteOfWeek(unixSeconds, utcOffsetMinutes);
  const two = (n) => String(n).padStart(2, '0');
  return `${WEEKDAYS[Math.floor(at / 1440)]} ${two(Math.floor((at % 1440) / 60))}:${two(at % 60)}`;
}

/**
 * The nodes of the group the call is about that other tools are taking out now (contract
 * 0.3.7): `[{ node, by }]`, as the run counts them against the group's budget (`by`:
 * 'karpenter', 'cluster-autoscaler', 'kured (…)', …). Empty when the policy ignores them, when no
 * one disrupts any, and in calls about no node group.
 */
export function othersDisrupting() {
  return hostOthersDisrupting();
}

/** Who else is taking `node` out now, or undefined. `others`: `othersDisrupting()`. */
export function disruptedBy(node, others = hostOthersDisrupting()) {
  return others.find((d) => d.node === node)?.by;
}

/** Objects the policy's contextResources grant, as plain objects (a refused read throws). */
export function listObjects(apiVersion, kind, namespace, selector) {
  return JSON.parse(hostListObjects(apiVersion, kind, namespace, selector));
}

/** A Pod, with the fields policies need. */
export class Pod {
  static of(obj) {
    const meta = obj.metadata ?? {};
    const status = obj.status ?? {};
    const pod = new Pod();
    pod.namespace = meta.namespace ?? '';
    pod.name = meta.name ?? '';
    pod.phase = status.phase ?? '';
    pod.ready = (status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
    pod.node = obj.spec?.nodeName ?? '';
    pod.labels = meta.labels ?? {};
    return pod;
  }

  get finished() {
    return this.phase === 'Succeeded' || this.phase === 'Failed';
  }

  get key() {
    return `${this.namespace}/${this.name}`;
  }
}

/** Pods (`v1`) in `namespace` (undefined: all) matching the label `selector`, as `Pod`s: `node` is the node it runs on ('' while pending). */
export function pods(namespace, selector) {
  return listObjects('v1', 'Pod', namespace, selector).map(Pod.of);
}

/** The names of the nodes running pods in `namespace` (undefined: all) that match the label `selector` (finished pods left out), as a Set. */
export function nodesRunning(namespace, selector) {
  return new Set(pods(namespace, selector).filter((p) => p.node !== '' && !p.finished).map((p) => p.node));
}

/** A Deployment, StatefulSet, ReplicaSet or DaemonSet: how many pods it wants and has. */
export class Workload {
  static of(kind, obj) {
    const meta = obj.metadata ?? {};
    const spec = obj.spec ?? {};
    const status = obj.status ?? {};
    const w = new Workload();
    w.kind = kind;
    w.namespace = meta.namespace ?? '';
    w.name = meta.name ?? '';
    if (kind === 'DaemonSet') {
      w.desired = status.desiredNumberScheduled ?? 0;
      w.available = status.numberAvailable ?? 0;
    } else {
      // replicas absent means 1; a StatefulSet before 1.22 reports no availableReplicas.
      w.desired = spec.replicas ?? 1;
      w.available = status.availableReplicas ?? status.readyReplicas ?? 0;
    }
    return w;
  }

  /** Fewer available pods than it wants (a boolean). */
  get short() {
    return this.available < this.desired;
  }

  get key() {
    return `${this.namespace}/${this.name}`;
  }
}

/**
 * A PodDisruptionBudget as the disruption controller last computed it (all zero until it has:
 * a new budget allows no disruption).
 */
export class PodDisruptionBudget {
  static of(obj) {
    const meta = obj.metadata ?? {};
    const status = obj.status ?? {};
    const b = new PodDisruptionBudget();
    b.namespace = meta.namespace ?? '';
    b.name = meta.name ?? '';
    b.disruptionsAllowed = status.disruptionsAllowed ?? 0;
    b.currentHealthy = status.currentHealthy ?? 0;
    b.desiredHealthy = status.desiredHealthy ?? 0;
    b.expectedPods = status.expectedPods ?? 0;
    return b;
  }

  /** It allows no eviction now. */
  get blocks() {
    return this.disruptionsAllowed <= 0;
  }

  get key() {
    return `${this.namespace}/${this.name}`;
  }
}

/** PodDisruptionBudgets (`policy/v1`), as `PodDisruptionBudget`s. */
export function podDisruptionBudgets(namespace, selector) {
  return listObjects('policy/v1', 'PodDisruptionBudget', namespace, selector).map(PodDisruptionBudget.of);
}

/** Deployments, StatefulSets, ReplicaSets or DaemonSets (`apps/v1`), as `Workload`s. */
export function workloads(kind, namespace, selector) {
  return listObjects('apps/v1', kind, namespace, selector).map((o) => Workload.of(kind, o));
}

/**
 * Instances oldest first, as a new array: an unknown creation time (`created` undefined) sorts
 * first, as the oldest (a node that never registered); names break ties (by code unit).
 */
export function oldestFirst(instances) {
  const key = (i) => (i.created === undefined ? -Infinity : Number(i.created));
  const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return [...instances].sort((a, b) => key(a) - key(b) || byName(a, b));
}
