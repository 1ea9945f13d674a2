// {{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
// - select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
// - batch: at most 2 nodes at a time;
// - gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
//   Ready, then abort.
// Change them, and the tests (app.test.mjs) and fixtures (fixtures/) with them. An export for
// each point served; the build declares them (and defers the points left out).

import { DEFER, anyConfig, candidatesOf, choose, holdWhile, oldestFirst, pods, size } from './rollout_ext_hooks.js';

export const HOLD = 'example.com/hold';

export const metadata = anyConfig('{{name}}');

export const selection = {
  select(ctx, group, candidates) {
    const chosen = candidatesOf(candidates).filter((c) => c.reason !== undefined && c.label(HOLD) !== 'true');
    return choose(oldestFirst(chosen).map((c) => [c.name, 'oldest first']));
  },
};

export const batching = {
  nextBatch(ctx, progress, pending) {
    return size(Math.min(2, progress.maxBatch), 'at most 2 at a time');
  },
};

export const gates = {
  check(ctx, phase, batch, summary) {
    if (phase !== 'after-batch') {
      return DEFER;
    }
    const notReady = pods('default').filter((p) => !p.ready).map((p) => p.key);
    return holdWhile(batch, 3, 30, 'pods of default not Ready', notReady);
  },
};
