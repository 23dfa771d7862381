/**
 * The core's error type. It lives in src/errors/ (a leaf every layer may import, so the store,
 * policy and markdown can throw it without importing the core); faces and core modules import it
 * from here or from there alike.
 */
export * from '../errors/index.js';
