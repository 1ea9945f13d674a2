// Unit tests of app.js on the SDK's stand-in host: `node --test` here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as t from './sdk/js/rollout_ext_testing.js';

// After the stand-in host: the hook imports the host.
const app = await import('./app.js');

test('oldest first and never a held node', () => {
  const nodes = [
    t.node('young', { created: 300n }),
    t.node('held', { created: 100n, labels: { [app.HOLD]: 'true' } }),
    t.node('old', { created: 200n }),
    t.node('fresh', { created: 50n, upToDate: true, reason: undefined }),
  ];
  const chosen = app.select({ chosen: t.chosen(nodes) });
  assert.deepEqual(t.answer(chosen).order.map((c) => c.name), ['old', 'young']);
});

test('at most two at a time', () => {
  const pending = [t.node('a'), t.node('b'), t.node('c')];
  const sized = app.nextBatch({ progress: t.progress(pending, 3) });
  assert.equal(t.answer(sized).count, 2);
});

test('after a batch it waits three checks, then aborts', () => {
  t.cluster.reset(t.pod('default', 'web-0', { ready: false }));
  const check = (attempt) => t.answer(app.afterBatch({ batch: t.batch(['n1'], { attempt }) }));
  assert.deepEqual(check(0), { answer: 'wait', seconds: 30, reason: 'pods of default not Ready: default/web-0 (check 1 of 3)' });
  assert.deepEqual(check(2), { answer: 'abort', reason: 'pods of default not Ready: default/web-0 after 3 checks' });
});
