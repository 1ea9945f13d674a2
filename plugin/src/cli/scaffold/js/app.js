// {{name}}: a rollout-ext policy hook, as `kubectl rollout-ext hooks new` wrote it. Its rules:
// - select: the built-in choice, oldest first, never a node labelled example.com/hold=true;
// - batch: at most 2 nodes at a time;
// - gate: after each batch, wait (3 checks, 30 s apart) while a pod of namespace default is not
//   Ready, then abort.
// Change them, and the tests (app.test.mjs) and fixtures (fixtures/) with them. An export for
// each point served; the build declares them (and defers the points left out).

import { DEFER, PROCEED, anyConfig, choose, hold, oldestFirst, pods, size } from './rollout_ext_hooks.js';

export const HOLD = 'example.com/hold';

export const metadata = anyConfig('{{name}}');

export const selection = {
  select(ctx, group, candidates) {
    const everyone = candidates.get(0, candidates.len());
    const chosen = everyone.filter((c, i) => c.reason !== undefined && candidates.label(i, HOLD) !== 'true');
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
    const n = pods('default').filter((p) => !p.ready).length;
    return n === 0 ? PROCEED : hold(batch, 3, 30, `${n} pod(s) of default not Ready`);
  },
};
