// The site-policy example (examples-hooks/site-policy) again, in JavaScript on the SDK's helpers:
// fewest pods first and never a node labelled example.com/pinned=true; at most 2 nodes per batch,
// never two of one example.com/rack; after each batch, wait (3 checks, 20 s apart) while a pod in
// namespace payments is not Ready, then abort.

import { PROCEED, chooseBy, hold, pods, size } from './rollout_ext_hooks.js';

export const name = 'site-policy-js';
const PINNED = 'example.com/pinned';
const RACK = 'example.com/rack';

export function select({ candidates }) {
  const chosen = candidates.filter((c) => !c.upToDate && c.label(PINNED) !== 'true');
  return chooseBy(chosen, (c) => c.pods, (c) => `${c.pods} pods to move`);
}

export function nextBatch({ pending }) {
  const two = pending.length > 1 && pending[0].label(RACK) !== pending[1].label(RACK);
  return size(two ? 2 : 1, 'at most 2, one per rack');
}

export function afterBatch({ batch }) {
  const n = pods('payments').filter((p) => !p.ready).length;
  return n === 0 ? PROCEED : hold(batch, 3, 20, `${n} payments pod(s) not Ready`);
}
