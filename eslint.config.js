// Lint (npm test runs it): the layering of DESIGN.md §1, no import cycles, and typescript-eslint's
// recommended rules. Why these plugins and these rules: docs/decisions.md, "Lint and layering".
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import boundaries from 'eslint-plugin-boundaries';
import importX from 'eslint-plugin-import-x';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

/*
 * Imports flow one way:
 *
 *   root (app.ts, server.ts, main.ts) → faces (http, mcp, web) → face-shared
 *     → auth, core, policy → retrieval → store
 *
 * and any layer may use the leaves: errors, config (config.ts, version.ts), metrics (metrics.ts) and markdown. No face
 * imports another face or the store; the store knows no rules; policy is pure (it imports only
 * the error type), so core, auth and retrieval may all consult it. `import type` obeys the same
 * rules as a value import: a type in a layer's signature is a dependency on that layer too.
 */

/** Where each layer lives: folders under src/ ... */
const FOLDERS = {
  // What both faces use: presenters (the JSON shape of a record) and the HTTP helpers (error
  // rendering, session cookies, the caller hook). Listed before `face`, which holds src/http/.
  'face-shared': ['presenters', 'http/shared'],
  face: ['http', 'mcp', 'web', 'oauth', 'git'],
  auth: ['auth'],
  core: ['core'],
  policy: ['policy'],
  retrieval: ['retrieval'],
  store: ['store'],
  markdown: ['markdown'],
  errors: ['errors'],
  // The operator's command line: part of the composition root (it opens the store and calls core,
  // retrieval and the store's backup as main.ts does); only the root imports it.
  cli: ['cli'],
};
/** ... and single files at the top of src/. */
const FILES = {
  root: ['app.ts', 'server.ts', 'main.ts'],
  config: ['config.ts', 'version.ts'],
  // The process-wide Prometheus registry: core counts commits and retrieval times searches
  // without importing a face (src/http/metrics.ts serves it).
  metrics: ['metrics.ts'],
};

const LEAVES = ['errors', 'config', 'markdown', 'metrics'];
/** What each layer may import besides itself. The root may import anything. */
const MAY_IMPORT = {
  face: ['face-shared', 'auth', 'core', 'policy', 'retrieval', ...LEAVES],
  'face-shared': ['auth', 'core', 'policy', 'retrieval', ...LEAVES],
  auth: ['core', 'policy', 'retrieval', 'store', ...LEAVES],
  core: ['auth', 'policy', 'retrieval', 'store', ...LEAVES],
  policy: ['errors'],
  retrieval: ['policy', 'store', ...LEAVES],
  store: ['errors', 'config'],
  // Plus the sensitivity scale, below.
  markdown: ['errors'],
  errors: [],
  config: [],
  metrics: [],
};

/** A layer as a boundaries selector: an element type (a folder) or a file category (a file). */
const layer = (name) => (name in FILES ? { file: { categories: name } } : { element: { types: name } });
const file = (path) => ({ file: { path } });

export default defineConfig(
  tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      // import-x must parse the .ts files an import leads to, or it cannot follow a cycle through them.
      'import-x/extensions': ['.ts', '.js', '.mjs'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createTypeScriptImportResolver({ project: './tsconfig.json' })],
    },
    rules: {
      // A leading underscore marks a name left unused on purpose (a field destructured away, a
      // parameter an interface requires), as the code already does.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // Runtime cycles. `import type` is erased, so it is left out: it cannot make a module load
      // half-initialised (the layer rules below still hold types to the one direction).
      'import-x/no-cycle': 'error',
    },
  },
  {
    // Tests and benchmarks read JSON bodies as `any`; typing each one would add nothing.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['src/**/*.ts'],
    plugins: { boundaries },
    settings: {
      // boundaries resolves imports through eslint-module-utils: `.js` specifiers to `.ts` files.
      'import/resolver': { typescript: { project: './tsconfig.json' } },
      'boundaries/include': ['src/**/*.ts'],
      'boundaries/dependency-nodes': ['import', 'export', 'dynamic-import'],
      'boundaries/elements': Object.entries(FOLDERS).flatMap(([type, dirs]) => dirs.map((dir) => ({ type, pattern: `src/${dir}`, partialMatch: false }))),
      'boundaries/files': Object.entries(FILES).flatMap(([category, names]) => names.map((name) => ({ category, pattern: `src/${name}` }))),
    },
    rules: {
      // Every file under src/ belongs to a layer: a new folder or top-level file must be placed
      // in FOLDERS or FILES before it lints.
      'boundaries/no-unknown-files': 'error',
      'boundaries/dependencies': [
        'error',
        {
          default: 'disallow',
          policies: [
            { from: layer('root'), allow: { to: [{ element: { isUnknown: false } }, { file: { isUnknown: false } }] } },
            { from: layer('cli'), allow: { to: [{ element: { isUnknown: false } }, { file: { isUnknown: false } }] } },
            ...Object.entries(MAY_IMPORT)
              .filter(([, to]) => to.length > 0)
              .map(([from, to]) => ({ from: layer(from), allow: { to: to.map(layer) } })),
            // The sensitivity scale (a pure module that imports nothing) is the vocabulary of
            // markdown's `::: level` blocks.
            { from: layer('markdown'), allow: { to: file('src/policy/sensitivity.ts') } },
          ],
        },
      ],
    },
  },
);
