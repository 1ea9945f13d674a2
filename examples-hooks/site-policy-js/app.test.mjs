// Unit tests of app.js on the SDK's stand-in host (hooks-sdk/js/rollout_ext_testing.js), in
// JavaScript: `node --test` in this directory. `make test` runs them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as t from '../../hooks-sdk/js/rollout_ext_testing.js';

// After the stand-in host: the hook imports the host.
const app = await import('./app.js');
const PINNED = 'example.com/pinned';
const RACK = 'example.com/rack';

test('fewest pods first and never a pinned node', () => {
  t.cluster.reset();
  const nodes = [
    t.node('a', { pods: 5 }),
    t.node('b', { pods: 1, labels: { [PINNED]: 'true' } }),
    t.node('c', { pods: 2 }),
    t.node('d', { upToDate: true, reason: undefined }),
  ];
  const chosen = app.select({ candidates: t.candidates(nodes) });
  assert.deepEqual(t.answer(chosen), {
    answer: 'choose',
    order: [
      { name: 'c', reason: '2 pods to move' },
      { name: 'a', reason: '5 pods to move' },
    ],
  });
});

test('two at a time only from two racks', () => {
  const two = [t.node('a', { labels: { [RACK]: 'r1' } }), t.node('b', { labels: { [RACK]: 'r2' } })];
  const oneRack = [t.node('a', { labels: { [RACK]: 'r1' } }), t.node('b', { labels: { [RACK]: 'r1' } })];
  for (const [pending, size] of [[two, 2], [oneRack, 1], [two.slice(0, 1), 1]]) {
    const sized = app.nextBatch({ pending: t.candidates(pending) });
    assert.equal(t.answer(sized).count, size);
  }
});

test('after a batch it waits for payments, then aborts', () => {
  t.cluster.reset(t.pod('payments', 'api-0', { ready: false }), t.pod('payments', 'api-1'));
  const check = (attempt) => t.answer(app.afterBatch({ batch: t.batch(['a'], { attempt }) }));
  assert.deepEqual(check(0), {
    answer: 'wait',
    seconds: 20,
    reason: '1 payments pod(s) not Ready (check 1 of 3)',
  });
  assert.deepEqual(check(2), { answer: 'abort', reason: '1 payments pod(s) not Ready after 3 checks' });
  assert.deepEqual(t.cluster.asked, [
    ['v1', 'Pod', 'payments', undefined],
    ['v1', 'Pod', 'payments', undefined],
  ]);
  t.cluster.reset(t.pod('payments', 'api-0'));
  assert.deepEqual(check(0), { answer: 'proceed' });
});

test('the gate is asked after batches only', () => {
  t.cluster.reset(t.pod('payments', 'api-0', { ready: false }));
  const { gates } = t.exports(app);
  for (const phase of ['before-group', 'before-batch']) {
    assert.deepEqual(t.answer(gates.check(t.context(), phase, t.batch(['a']), t.healthy())), { answer: 'defer' });
  }
  const after = gates.check(t.context(), 'after-batch', t.batch(['a']), t.healthy());
  assert.equal(t.answer(after).answer, 'wait');
});
