/**
 * The core's error type. It lives in src/errors/ (a leaf every layer may import, so the store,
 * policy and markdown can throw it without importing the core); faces and core modules import it
 * from here or from there alike.
 */
export * from '../errors/index.js';

/** The store's test for "the database is out of reach for now" (faces answer 503 `unavailable`). */
export { isDatabaseUnavailable } from '../store/db.js';
