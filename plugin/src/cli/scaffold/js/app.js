// {{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
// - select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
// - batch: at most 2 nodes at a time;
// - gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
//   Ready, then abort.
// Change them, and the tests (app.test.mjs) and fixtures (fixtures/) with them. A function for
// each point served, taking apart the arguments it reads; the build declares them (and defers the
// points left out).

import { atMost, choose, holdWhile, oldestFirst, pods } from './rollout_ext_hooks.js';

export const name = '{{name}}';
export const HOLD = 'example.com/hold';

export function select({ chosen }) {
  const kept = chosen.filter((c) => c.label(HOLD) !== 'true');
  return choose(oldestFirst(kept).map((c) => [c.name, 'oldest first']));
}

export function nextBatch({ progress }) {
  return atMost(2, progress, 'at most 2 at a time');
}

// A gate asked after each batch only (check({ phase, batch }) is asked in every phase).
export function afterBatch({ batch }) {
  const notReady = pods('default').filter((p) => !p.ready).map((p) => p.key);
  return holdWhile(batch, 3, 30, 'pods of default not Ready', notReady);
}
