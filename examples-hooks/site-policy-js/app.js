// The site-policy example (examples-hooks/site-policy) again, in JavaScript on the SDK's helpers:
// fewest pods first and never a node labelled example.com/pinned=true; at most 2 nodes per batch,
// never two of one example.com/rack; after each batch, wait (3 checks, 20 s apart) while a pod in
// namespace payments is not Ready, then abort.

import { DEFER, PROCEED, anyConfig, candidatesOf, chooseBy, hold, pods, size } from './rollout_ext_hooks.js';

const PINNED = 'example.com/pinned';
const RACK = 'example.com/rack';

export const metadata = anyConfig('site-policy-js');

export const selection = {
  select(ctx, group, candidates) {
    const chosen = candidatesOf(candidates).filter((c) => !c.upToDate && c.label(PINNED) !== 'true');
    return chooseBy(chosen, (c) => c.pods, (c) => `${c.pods} pods to move`);
  },
};

export const batching = {
  nextBatch(ctx, progress, pending) {
    const two = pending.len() > 1 && pending.label(0, RACK) !== pending.label(1, RACK);
    return size(two ? 2 : 1, 'at most 2, one per rack');
  },
};

export const gates = {
  check(ctx, phase, batch, summary) {
    if (phase !== 'after-batch') {
      return DEFER;
    }
    const n = pods('payments').filter((p) => !p.ready).length;
    return n === 0 ? PROCEED : hold(batch, 3, 20, `${n} payments pod(s) not Ready`);
  },
};
