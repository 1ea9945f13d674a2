// fewest-pods: a rollout-ext policy hook written in JavaScript, built into a component with
// componentize-js against the same WIT as the Rust and Python hooks (hooks-sdk/wit/policy.wit).
//
// Selection only: the instances the built-in rules chose are replaced fewest pods first (the
// pods a drain would move), then by name, so the first batches disturb the least. Up-to-date
// instances are never chosen (that would need `force`). The points it leaves out defer (the
// build exports the SDK's deferring ones). The hook takes no config: any JSON object is accepted.
//
// The bindings map the WIT as jco does: interfaces are exported as objects of camelCase
// functions, records are objects with camelCase fields, enums are their kebab-case strings,
// variants are `{ tag, val }`, an option is `undefined` when none, and a function returning
// `result<T, string>` returns T or throws the error string.

import { log } from 'rollout-ext:policy/host@0.3.7';

// The contract this module is built against: the package version of hooks-sdk/wit/policy.wit.
const WIT_VERSION = '0.3.7';

export const metadata = {
  describe() {
    return {
      name: 'fewest-pods',
      // No SDK here: the SDK version of a JavaScript hook is the contract's.
      sdkVersion: WIT_VERSION,
      witVersion: WIT_VERSION,
      points: ['select'],
    };
  },

  validateConfig(config) {
    let value;
    try {
      value = JSON.parse(config);
    } catch (e) {
      // A thrown string becomes the `err`; a thrown Error would trap instead.
      throw `config is not JSON: ${e.message}`;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw `config must be a JSON object, not ${Array.isArray(value) ? 'an array' : JSON.stringify(value)}`;
    }
  },
};

export const selection = {
  select(ctx, group, candidates) {
    // The candidates stay with the host: one read brings them all (the fields only; labels
    // would be read one call each).
    const everyone = candidates.get(0, candidates.len());
    const chosen = everyone.filter((c) => c.reason !== undefined && !c.upToDate);
    if (chosen.length === 0) {
      return { tag: 'defer' };
    }
    // Names compare by code unit, not by locale: node names are ASCII, and the order must not
    // depend on the engine's locale data.
    chosen.sort((a, b) => a.pods - b.pods || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    log('debug', `fewest-pods: ${chosen.length} instance(s) of ${group.name}`);
    return {
      tag: 'choose',
      val: chosen.map((c) => ({
        name: c.name,
        reason: `${c.reason}; fewest pods first (${c.pods} pods)`,
        force: false,
      })),
    };
  },
};
