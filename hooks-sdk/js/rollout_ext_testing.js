// A stand-in host for unit tests of a JavaScript hook, run with Node's test runner outside a
// component (`node --test`). Importing this module has the host import
// ('rollout-ext:policy/host@…') served by `cluster`, which each test sets, and the hook's
// './rollout_ext_hooks.js' served by the SDK's copy; import the hook after it, dynamically:
//
//   import * as t from '../../hooks-sdk/js/rollout_ext_testing.js';
//   const app = await import('./app.js');
//
//   t.cluster.reset(t.pod('payments', 'api-0', { ready: false }));
//   const verdict = app.gates.check(t.context(), 'after-batch', t.batch(['n1']), t.healthy());
//   assert.deepEqual(t.answer(verdict), { answer: 'wait', seconds: 20, reason: '…' });
//
// The builders make a call's arguments as the Rust SDK's `testing` module does, and `answer`
// reads an answer in the words of `kubectl rollout-ext hooks run`.

import { register } from 'node:module';

/** What the stand-in host answers, and what the hook asked of it. */
export const cluster = {
  /** The objects `listObjects` serves; `estimates` and `others` are set after it when needed. */
  reset(...objects) {
    this.objects = objects;
    this.estimates = { batch: undefined, remaining: undefined };
    this.others = [];
    this.asked = [];
    this.logs = [];
    return this;
  },
  list(apiVersion, kind, namespace, selector) {
    this.asked.push([apiVersion, kind, namespace, selector]);
    const terms = selectorTerms(selector ?? '');
    const wanted = (o) =>
      o.apiVersion === apiVersion &&
      o.kind === kind &&
      (namespace === undefined || o.metadata?.namespace === namespace) &&
      terms.every((test) => test(o.metadata?.labels ?? {}));
    return JSON.stringify(this.objects.filter(wanted));
  },
};

/**
 * A label selector's terms as tests of a labels object: key=value, key==value, key!=value, key
 * and !key, comma-separated (as the Rust SDK's fake cluster understands them); any other term
 * throws, as the host refuses a selector it cannot read.
 */
function selectorTerms(text) {
  const terms = [];
  for (const term of text.split(',').map((t) => t.trim()).filter((t) => t !== '')) {
    let key;
    if (term.includes('!=')) {
      const [k, v] = term.split('!=', 2).map((x) => x.trim());
      key = k;
      terms.push((labels) => labels[k] !== v);
    } else if (term.includes('=')) {
      const [k, v] = term.replace('==', '=').split('=', 2).map((x) => x.trim());
      key = k;
      terms.push((labels) => labels[k] === v);
    } else if (term.startsWith('!')) {
      key = term.slice(1).trim();
      terms.push((labels) => !Object.hasOwn(labels, key));
    } else {
      key = term;
      terms.push((labels) => Object.hasOwn(labels, key));
    }
    if (key === '' || /[ ()!=]/.test(key)) {
      throw `label selector term ${JSON.stringify(term)} is not one the stand-in host understands (key=value, key!=value, key, !key)`;
    }
  }
  return terms;
}
cluster.reset();
globalThis.rolloutExtStandIn = cluster;

const host = `const c = () => globalThis.rolloutExtStandIn;
export function listObjects(apiVersion, kind, namespace, selector) {
  return c().list(apiVersion, kind, namespace, selector);
}
export function estimates() { return c().estimates; }
export function othersDisrupting() { return c().others; }
export function log(level, message) { c().logs.push([level, message]); }
export function queryMetrics() { throw { tag: 'failed', val: 'not served by the stand-in host' }; }
export function queryMetricsRange() { throw { tag: 'failed', val: 'not served by the stand-in host' }; }`;
const sdk = new URL('./rollout_ext_hooks.js', import.meta.url).href;
const resolver = `export async function resolve(specifier, context, next) {
  if (specifier.startsWith('rollout-ext:policy/host@')) {
    return { url: 'data:text/javascript,' + encodeURIComponent(${JSON.stringify(host)}), shortCircuit: true };
  }
  if (specifier === './rollout_ext_hooks.js') {
    return { url: ${JSON.stringify(sdk)}, shortCircuit: true };
  }
  return next(specifier, context);
}`;
register('data:text/javascript,' + encodeURIComponent(resolver));
// The SDK, once its host import is served.
const helpers = await import(sdk);

/**
 * `nodes` as a short-form `select` or `nextBatch` is given them (its `candidates` or
 * `pending`): an array of the SDK's candidates.
 */
export function candidates(nodes) {
  return helpers.candidatesOf(new Instances(nodes));
}

/**
 * Those of `nodes` in the current choice (with a reason), as a short-form `select` is given its
 * `chosen`.
 */
export function chosen(nodes) {
  return candidates(nodes).filter((c) => c.reason !== undefined);
}

/**
 * What the component exports for the hook module `app` (its namespace), as the build makes
 * them: `{ metadata, selection, batching, gates }`, the SDK's deferring ones for the points it
 * does not serve, for a call as the plugin makes it:
 * `t.exports(app).gates.check(t.context(), 'before-batch', …)`.
 */
export function exports(app, file = 'app.js') {
  return helpers.hookExports(app, file);
}

/**
 * The context of a call at `now` (Unix seconds; a Friday noon by default): `context(now)`, or
 * `context({ now, config, dryRun, hookName })`. `now` is given to the hook as a BigInt, as the
 * host gives it.
 */
export function context(options = {}) {
  const given = typeof options === 'object' ? options : { now: options };
  const { now = 1795780800n, config = {}, dryRun = true, hookName = 'hook' } = given;
  return { now: BigInt(now), runId: 'test', dryRun, hookName, config: JSON.stringify(config) };
}

/**
 * A node of `group`: outdated and in the built-in choice (`reason`) unless told; `reason:
 * undefined` leaves it out of the choice.
 */
export function node(name, options = {}) {
  const {
    zone, pods = 0, podsNotReady = 0, labels = {}, annotations = {}, taints = [], created,
    ready = true, unschedulable = false, upToDate = false, group = 'nodes', kubeletVersion,
  } = options;
  const reason = Object.hasOwn(options, 'reason') ? options.reason : 'outdated';
  const record = {
    kind: 'node', name, group, role: 'node', zone, ready, unschedulable, created,
    kubeletVersion, pods, podsNotReady, upToDate, reason,
  };
  // A taint as [key, value, effect], as the Python stand-in takes it, or as the record.
  const asTaint = (t) => (Array.isArray(t) ? { key: t[0], value: t[1], effect: t[2] } : t);
  Object.defineProperty(record, 'aside', { value: { labels, annotations, taints: taints.map(asTaint) } });
  return record;
}

/** The `instances` resource a selection's candidates and a batch's pending come in. */
export class Instances {
  constructor(nodes) {
    this.nodes = [...nodes];
  }
  len() { return this.nodes.length; }
  get(start, count) { return this.nodes.slice(start, start + count); }
  label(i, key) { return this.nodes[i].aside.labels[key]; }
  annotation(i, key) { return this.nodes[i].aside.annotations[key]; }
  labels(i) { return Object.entries(this.nodes[i].aside.labels).map(([key, value]) => ({ key, value })); }
  annotations(i) {
    return Object.entries(this.nodes[i].aside.annotations).map(([key, value]) => ({ key, value }));
  }
  taints(i) { return [...this.nodes[i].aside.taints]; }
}

/**
 * A duration estimate (seconds as BigInts, as the host gives them), for
 * `t.cluster.estimates = { batch: undefined, remaining: t.estimate(9 * 3600) }`.
 */
export function estimate(seconds, p90Seconds = seconds, basis = 'test') {
  return { seconds: BigInt(seconds), p90Seconds: BigInt(p90Seconds), basis };
}

/** The group of `nodes`, with its budget. */
export function group(nodes, { maxSurge = 0, maxUnavailable = 1, name = 'nodes' } = {}) {
  return {
    name, role: 'node', size: nodes.length,
    upToDate: nodes.filter((n) => n.upToDate).length,
    selected: nodes.filter((n) => n.reason !== undefined).length,
    maxSurge, maxUnavailable,
  };
}

/** Where the update of the group of `pending` stands when the next batch is sized. */
export function progress(pending, maxBatch = 1, { batchesDone = 0, updated = 0 } = {}) {
  return { group: group(pending, { maxUnavailable: maxBatch }), batchesDone, updated, maxBatch };
}

/** The batch a gate is asked about; `attempt` the waits answered so far. */
export function batch(instances, { attempt = 0, index = 0, canary = false } = {}) {
  return { index, instances: [...instances], canary, attempt };
}

/** A validation summary with nothing wrong. */
export function healthy(nodes = 3, pods = 10) {
  return {
    nodesTotal: nodes, nodesNotReady: 0, nodesUnschedulable: 0, podsTotal: pods,
    podsNotReady: 0, systemPodsNotReady: 0, budgets: [], failures: [],
  };
}

/** A Pod object, as `listObjects` serves it. */
export function pod(namespace, name, { ready = true, node = '', labels = {}, phase = 'Running' } = {}) {
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { namespace, name, labels },
    spec: { nodeName: node },
    status: { phase, conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  };
}

/** A hook's answer in the words of `hooks run`: { answer: 'choose', order: [...] }, … */
export function answer(value) {
  switch (value?.tag) {
    case 'defer': return { answer: 'defer' };
    case 'choose': return { answer: 'choose', order: value.val.map(({ name, reason }) => ({ name, reason })) };
    case 'size': return { answer: 'size', count: value.val.count, reason: value.val.reason };
    case 'pause': return { answer: 'pause', seconds: value.val.seconds, reason: value.val.reason };
    case 'wait': return { answer: 'wait', seconds: value.val.seconds, reason: value.val.reason };
    case 'proceed': return { answer: 'proceed' };
    case 'abort': return { answer: 'abort', reason: value.val };
    default: throw new TypeError(`not an answer: ${JSON.stringify(value)}`);
  }
}
