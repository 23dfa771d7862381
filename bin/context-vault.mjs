#!/usr/bin/env node
// The operator's command line (README "Operator's command line"): runs src/main.ts through the
// installed tsx, so `context-vault serve`, `context-vault backup --out FILE`, ... work from an
// `npm ci` checkout without a build step.
import { register } from 'tsx/esm/api';

register();
await import(new URL('../src/main.ts', import.meta.url).href);
