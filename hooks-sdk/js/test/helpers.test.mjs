// Unit tests of the JavaScript helpers, run with Node's own test runner (`node --test`), outside
// a component, on the SDK's stand-in host (rollout_ext_testing.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as t from '../rollout_ext_testing.js';

const h = await import('../rollout_ext_hooks.js');

test('hold waits for the checks it is given, then aborts', () => {
  assert.deepEqual(h.hold({ attempt: 0 }, 3, 20, 'pods not Ready'), {
    tag: 'wait',
    val: { seconds: 20, reason: 'pods not Ready (check 1 of 3)' },
  });
  assert.equal(h.hold({ attempt: 1 }, 3, 20, 'x').tag, 'wait');
  assert.deepEqual(h.hold({ attempt: 2 }, 3, 20, 'x'), { tag: 'abort', val: 'x after 3 checks' });
  assert.deepEqual(h.hold({ attempt: 0 }, 1, 20, 'x'), { tag: 'abort', val: 'x after 1 check' });
});

test('week windows take BigInt seconds and wrap past Sunday midnight', () => {
  // 2026-11-27T12:00:00Z is a Friday.
  const friday = 1795780800n;
  assert.equal(h.minuteOfWeek(friday), 4 * 1440 + 12 * 60);
  assert.ok(h.inWindow(friday, 'fri 09:00', 'fri 17:00'));
  assert.ok(!h.inWindow(friday, 'sat 22:00', 'mon 06:00'));
  assert.ok(h.inWindow(friday + 2n * 86400n, 'sat 22:00', 'mon 06:00'), 'Sunday noon');
  assert.ok(!h.inWindow(friday, 'fri 09:00', 'fri 17:00', 6 * 60), 'at UTC+6 it is 18:00');
  assert.throws(() => h.inWindow(friday, 'fry 09:00', 'fri 17:00'), /unknown day/);
});

test('chooseBy orders candidates by several rules, with reasons', () => {
  const instances = new t.Instances([
    t.node('a1', { zone: 'a', created: 30n }),
    t.node('b1', { zone: 'b', created: 20n }),
    t.node('a2', { zone: 'a', created: 10n }),
    t.node('c1', { zone: 'c', labels: { 'drain-first': 'yes' } }),
  ]);
  const everyone = h.candidatesOf(instances);
  assert.equal(everyone[3].index, 3);
  assert.deepEqual(everyone[3].labels(), { 'drain-first': 'yes' });
  const zones = h.countBy(everyone, (c) => c.zone);
  assert.deepEqual(zones, { a: 2, b: 1, c: 1 });
  const key = (c) => [c.label('drain-first') === undefined, -zones[c.zone], c.created];
  const chosen = t.answer(h.chooseBy(everyone, key, (c) => `zone ${c.zone}: ${zones[c.zone]}`));
  assert.deepEqual(
    chosen.order.map((c) => [c.name, c.reason]),
    [['c1', 'zone c: 1'], ['a2', 'zone a: 2'], ['a1', 'zone a: 2'], ['b1', 'zone b: 1']],
  );
  // A key that is not an array is one rule; undefined sorts first.
  const names = t.answer(h.chooseBy(everyone, (c) => c.created, () => '')).order.map((c) => c.name);
  assert.deepEqual(names, ['c1', 'a2', 'b1', 'a1']);
});

test('chooseByRules names the rule that placed each choice', () => {
  const instances = new t.Instances([
    t.node('a1', { zone: 'a' }),
    t.node('b1', { zone: 'b', labels: { tier: 'spot' } }),
    t.node('a2', { zone: 'a' }),
    t.node('c1', { zone: 'c' }),
  ]);
  const everyone = h.candidatesOf(instances);
  const zones = h.countBy(everyone, (c) => c.zone);
  const rules = [
    ['spot first', (c) => c.label('tier') !== 'spot'],
    ['largest zone first', (c) => -zones[c.zone], (c) => `zone ${c.zone} has ${zones[c.zone]}`],
    ['oldest first', (c) => c.created],
  ];
  const chosen = t.answer(h.chooseByRules(everyone, rules));
  assert.deepEqual(chosen.order.map((c) => [c.name, c.reason]), [
    ['b1', 'spot first'],
    ['a1', 'tied with a2 on every rule'],
    ['a2', 'largest zone first: zone a has 2'],
    ['c1', 'after a2 by largest zone first: zone c has 1'],
  ]);
  assert.deepEqual(t.answer(h.chooseByRules(everyone.slice(0, 1), rules)).order, [
    { name: 'a1', reason: 'the only candidate' },
  ]);
  assert.equal(h.todayAt(1795780800n, '18:00'), 1795780800n + 6n * 3600n);
  assert.equal(t.context(1795867200).now, 1795867200n, 'a bare now, as the Rust and Python builders take it');
  assert.equal(t.context({ now: 5n }).now, 5n);
  assert.equal(h.todayAt(1795780800, '18:00', 60), 1795780800 + 5 * 3600);
  assert.deepEqual(t.answer(h.abort('no')), { answer: 'abort', reason: 'no' });
  const batch = t.batch(['n1']);
  assert.deepEqual(t.answer(h.holdWhile(batch, 5, 60, 'blocked', [])), { answer: 'proceed' });
  assert.deepEqual(t.answer(h.holdWhile(batch, 5, 60, 'blocked', ['shop/db'])), {
    answer: 'wait',
    seconds: 60,
    reason: 'blocked: shop/db (check 1 of 5)',
  });
  assert.deepEqual(t.answer(h.abortIfAny('short', ['a', 'b'])), { answer: 'abort', reason: 'short: a, b' });
  t.cluster.reset();
  t.cluster.estimates = { batch: undefined, remaining: t.estimate(9 * 3600) };
  assert.equal(h.estimates().remaining.p90Seconds, 32400n);
});

test('the stand-in host filters by label selector', () => {
  t.cluster.reset(
    t.pod('a', 'crit', { labels: { critical: 'true' }, node: 'n1' }),
    t.pod('a', 'calm', { labels: { critical: 'false' }, node: 'n2' }),
    t.pod('b', 'bare', { node: 'n3' }),
  );
  const names = (pods) => pods.map((p) => p.name);
  assert.deepEqual(names(h.pods(undefined, 'critical=true')), ['crit']);
  assert.deepEqual(names(h.pods(undefined, 'critical!=true')), ['calm', 'bare']);
  assert.deepEqual(names(h.pods('a', '!critical')), []);
  assert.deepEqual(names(h.pods(undefined, 'critical')), ['crit', 'calm']);
  assert.throws(() => h.pods(undefined, 'critical in (true)'), /not one the stand-in host understands/);
  assert.deepEqual(h.nodesRunning(undefined, 'critical'), new Set(['n1', 'n2']));
});

test('percentOf rounds as Kubernetes rounds budgets', () => {
  assert.equal(h.percentOf(25, 10, true), 3);
  assert.equal(h.percentOf(25, 10, false), 2);
  assert.equal(h.percentOf(100, 7, false), 7);
});

test('workloads read the API defaults: replicas absent is 1, ready when available is absent', () => {
  const sts = { apiVersion: 'apps/v1', kind: 'StatefulSet' };
  t.cluster.reset(
    { ...sts, metadata: { namespace: 'shop', name: 'web' }, spec: {}, status: {} },
    { ...sts, metadata: { namespace: 'shop', name: 'db' }, spec: { replicas: 3 }, status: { readyReplicas: 3 } },
  );
  const [web, db] = h.workloads('StatefulSet', 'shop');
  assert.deepEqual(t.cluster.asked, [['apps/v1', 'StatefulSet', 'shop', undefined]]);
  assert.equal(web.desired, 1);
  assert.equal(web.available, 0);
  assert.ok(web.short);
  assert.equal(db.available, 3);
  assert.ok(!db.short);
  t.cluster.reset({
    apiVersion: 'apps/v1',
    kind: 'DaemonSet',
    metadata: { name: 'agent' },
    status: { desiredNumberScheduled: 4, numberAvailable: 3 },
  });
  const [agent] = h.workloads('DaemonSet');
  assert.equal(agent.desired, 4);
  assert.ok(agent.short);
});

test('pods are Ready by their condition, finished by their phase', () => {
  t.cluster.reset(
    t.pod('payments', 'a'),
    t.pod('payments', 'b', { ready: false }),
    t.pod('payments', 'c', { ready: false, phase: 'Succeeded' }),
  );
  const [a, b, c] = h.pods('payments');
  assert.deepEqual([a.ready, b.ready, c.ready], [true, false, false]);
  assert.equal(c.finished, true);
  assert.equal(a.key, 'payments/a');
});

test('answers have the shapes of the WIT variants', () => {
  assert.deepEqual(h.size(2, 'two'), { tag: 'size', val: { count: 2, reason: 'two' } });
  assert.deepEqual(h.choose([['n1', 'old']]), {
    tag: 'choose',
    val: [{ name: 'n1', reason: 'old', force: false }],
  });
  assert.deepEqual(h.choose([]), { tag: 'choose', val: [] }, 'an empty choice updates none');
  assert.deepEqual(h.deferGates.check(), h.DEFER);
  const meta = h.anyConfig('site', ['select', 'gate']);
  assert.deepEqual(meta.describe().points, ['select', 'gate']);
  assert.throws(() => meta.validateConfig('[1]'), (e) => e === 'config must be an object');
  assert.throws(() => h.describe('site', ['sellect']), /unknown point/);
});

test('oldest first puts an unknown creation time first and breaks ties by name', () => {
  const order = h.oldestFirst([
    { name: 'c', created: 200n },
    { name: 'b', created: 100n },
    { name: 'a', created: 100n },
    { name: 'x', created: undefined },
  ]);
  assert.deepEqual(order.map((i) => i.name), ['x', 'a', 'b', 'c']);
});

test('the build entry defers the points left out and declares those served', () => {
  const gates = { check: () => h.PROCEED };
  const hook = h.hookExports({ metadata: h.anyConfig('site'), gates }, 'app.js');
  assert.equal(hook.selection, h.deferSelection);
  assert.equal(hook.batching, h.deferBatching);
  assert.equal(hook.gates, gates);
  assert.deepEqual(hook.metadata.describe().points, ['gate']);
  assert.throws(() => hook.metadata.validateConfig('[1]'), (e) => e === 'config must be an object');
});

test('a point served but not declared is refused naming it', () => {
  const batching = { nextBatch: () => h.size(1, 'one') };
  const hook = h.hookExports({ metadata: h.anyConfig('site', ['select']), batching }, 'app.js');
  assert.throws(() => hook.metadata.describe(), /app.js's export batching serves point "batch"/);
  const spread = { ...h.deferSelection };
  const quiet = h.hookExports({ metadata: h.anyConfig('site', []), selection: spread }, 'app.js');
  assert.deepEqual(quiet.metadata.describe().points, [], 'a spread deferral serves nothing');
  assert.throws(() => h.hookExports({}, 'app.js'), /rollout-ext-build: app.js exports no name and no metadata/);
});

test('the short form gives each function the arguments it takes apart', () => {
  const seen = [];
  const app = {
    name: 'site',
    select({ candidates, config, chosen }) {
      seen.push(['select', candidates.map((c) => c.name), config, chosen.map((c) => c.name)]);
      return h.choose(candidates.map((c) => [c.name, 'any']));
    },
    nextBatch: ({ now, pending, progress: { maxBatch } }) => {
      seen.push(['nextBatch', now, pending.map((c) => c.label('rack')), maxBatch]);
      return h.size(1, 'one');
    },
    beforeBatch: function ({ batch = Object.assign({}, { index: -1 }) }) {
      seen.push(['beforeBatch', batch.index]);
      return h.PROCEED;
    },
  };
  const hook = h.hookExports(app, 'app.js');
  assert.deepEqual(hook.metadata.describe(), h.describe('site', ['select', 'batch', 'gate']));
  const nodes = [t.node('a', { labels: { rack: 'r1' } }), t.node('b', { reason: undefined })];
  const ctx = t.context({ now: 600, config: { max: 2 } });
  hook.selection.select(ctx, t.group(nodes), new t.Instances(nodes));
  hook.batching.nextBatch(ctx, t.progress(nodes, 2), new t.Instances(nodes));
  for (const phase of ['before-group', 'before-batch', 'after-batch']) {
    const answer = hook.gates.check(ctx, phase, t.batch(['a'], { index: 4 }), t.healthy());
    assert.equal(t.answer(answer).answer, phase === 'before-batch' ? 'proceed' : 'defer');
  }
  assert.deepEqual(seen, [
    ['select', ['a', 'b'], { max: 2 }, ['a']],
    ['nextBatch', 600, ['r1', undefined], 2],
    ['beforeBatch', 4],
  ]);
});

test('an instant is said as its weekday and time', () => {
  assert.equal(h.dayAndTime(1795780800), 'fri 12:00');
  assert.equal(h.dayAndTime(1795780800n + 12n * 3600n + 28n * 60n), 'sat 00:28');
  assert.equal(h.dayAndTime(1795780800, -13 * 60), 'thu 23:00');
});

test('a candidate without a zone has the zone "", and a taint given as an array is the record', () => {
  const [a, b] = t.candidates([t.node('a', { zone: 'z1' }), t.node('b')]);
  assert.deepEqual([a.zone, b.zone], ['z1', '']);
  // A taint given as [key, value, effect], as in Python, is the record the host gives.
  const [tainted] = t.candidates([t.node('t', { taints: [['retiring', '', 'NoSchedule']] })]);
  assert.deepEqual(tainted.taints(), [{ key: 'retiring', value: '', effect: 'NoSchedule' }]);
  assert.ok(tainted.hasTaint('retiring') && !tainted.hasTaint('other'));
});

test('at most keeps to what the budget allows now, and says so', () => {
  const p = t.progress([t.node('a'), t.node('b')], 2);
  assert.deepEqual(t.answer(h.atMost(3, p, 'weekend')), { answer: 'size', count: 2, reason: 'weekend (2 allowed now)' });
  assert.deepEqual(t.answer(h.atMost(2, p, 'weekend')), { answer: 'size', count: 2, reason: 'weekend' });
});

test('the short form refuses what it cannot call, naming it', () => {
  const app = (points) => ({ name: 'site', ...points });
  const refused = (points, said) => assert.throws(() => h.hookExports(app(points), 'app.js'), (e) => e.message.includes(said));
  refused(
    { afterBatch: ({ b }) => h.PROCEED },
    "rollout-ext-build: app.js's afterBatch takes b, which is none of its arguments: take those it reads from its one argument, afterBatch({ ctx, config, now, batch, summary }), any of them in any order",
  );
  refused({ afterBatch: (batch) => h.PROCEED }, "app.js's afterBatch takes batch: take those it reads");
  refused({ afterBatch: (batch) => batch }, "app.js's afterBatch takes batch:");
  refused({ afterBatch: batch => batch }, "app.js's afterBatch takes its arguments otherwise");
  refused({ check: () => h.DEFER, afterBatch: () => h.PROCEED }, "app.js has check and a phase's gate (afterBatch)");
  refused({ check: () => h.DEFER, gates: h.deferGates }, 'app.js serves point "gate" twice, by export gates and by check');
  const { gates } = h.hookExports(app({ afterBatch: () => undefined }), 'app.js');
  assert.throws(
    () => gates.check(t.context(), 'after-batch', t.batch(['a']), t.healthy()),
    (e) => e === "app.js's afterBatch answered nothing (it returned undefined): return its answer",
  );
  const declared = h.hookExports({ metadata: h.anyConfig('site', []), afterBatch: () => h.PROCEED }, 'app.js');
  assert.throws(() => declared.metadata.describe(), /app.js's afterBatch serves point "gate"/);
});

test('a batch ends at its cautious estimate; a call about no batch has none', () => {
  t.cluster.estimates = {
    batch: { seconds: 300n, p90Seconds: 420n, basis: 'history of 2 runs' },
    remaining: { seconds: 900n, p90Seconds: 1200n, basis: 'history of 2 runs' },
  };
  assert.equal(h.estimates().remaining.seconds, 900n);
  assert.equal(h.batchEnds(1000n), 1420n);
  assert.equal(h.batchEnds(1000), 1420, 'a Number in, a Number out');
  assert.equal(h.runEnds(1000), 2200);
  assert.equal(h.runEnds(1000n), 2200n);
  assert.equal(h.batchEnds(1000n, { batch: undefined, remaining: undefined }), undefined);
  assert.equal(h.runEnds(1000, { batch: undefined, remaining: undefined }), undefined);
});

test('who else disrupts a node is found among the others the plugin tells', () => {
  t.cluster.others = [
    { node: 'ip-1', by: 'karpenter' },
    { node: 'ip-2', by: 'kured (its reboot lock on DaemonSet kube-system/kured)' },
  ];
  assert.equal(h.othersDisrupting().length, 2);
  assert.equal(h.disruptedBy('ip-1'), 'karpenter');
  assert.equal(h.disruptedBy('ip-3'), undefined);
  assert.equal(h.disruptedBy('ip-1', []), undefined);
});

test('a stand-in node is in the choice unless its reason is left out', () => {
  assert.equal(t.node('a').reason, 'outdated');
  assert.equal(t.node('b', { reason: undefined }).reason, undefined);
  const nodes = new t.Instances([t.node('c', { labels: { tier: 'web' } })]);
  assert.equal(nodes.label(0, 'tier'), 'web');
  assert.deepEqual(t.group([t.node('a'), t.node('b', { reason: undefined })]).selected, 1);
});

test('a schedule holds day ranges, lists and spans past midnight', () => {
  const friNoon = 1795780800n;
  const office = 'mon-fri 09:00-17:00';
  assert.equal(h.inSchedule(friNoon, office), true);
  assert.equal(h.inSchedule(friNoon + 6n * 3600n, office), false);
  assert.equal(h.inSchedule(friNoon + 86400n, [office]), false, 'Saturday');
  assert.equal(h.inSchedule(friNoon, office, 360), false);
  const nights = ['sat,sun 22:00-06:00', 'fri-mon 12:00-12:30'];
  assert.equal(h.inSchedule(friNoon, nights), true);
  const sunday3am = friNoon + 86400n + 15n * 3600n;
  assert.equal(h.inSchedule(sunday3am, nights), true);
  assert.equal(h.inSchedule(sunday3am + 86400n, nights), true);
  assert.equal(h.inSchedule(sunday3am + 2n * 86400n, nights), false);
  assert.throws(() => h.inSchedule(0, 'weekdays 09:00-17:00'), /schedule "weekdays 09:00-17:00": invalid weekday/);
  assert.throws(() => h.inSchedule(0, 'mon-fri 9-5'), /invalid time "9": expected HH:MM/);
});

test('these last keeps each part in its order', () => {
  assert.deepEqual(h.theseLast([1, 2, 3, 4, 5], (n) => n % 2 === 0), [1, 3, 5, 2, 4]);
});

test('budgets read what the disruption controller computed', () => {
  const pdb = { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget' };
  t.cluster.reset(
    { ...pdb, metadata: { namespace: 'shop', name: 'web' },
      status: { disruptionsAllowed: 1, currentHealthy: 3, desiredHealthy: 2, expectedPods: 3 } },
    { ...pdb, metadata: { namespace: 'shop', name: 'new' } },
  );
  const [web, fresh] = h.podDisruptionBudgets('shop');
  assert.deepEqual([web.key, web.disruptionsAllowed, web.blocks], ['shop/web', 1, false]);
  assert.deepEqual([fresh.expectedPods, fresh.blocks], [0, true]);
  assert.deepEqual(t.cluster.asked, [['policy/v1', 'PodDisruptionBudget', 'shop', undefined]]);
});
