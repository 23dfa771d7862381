import { pingStore } from '../store/db.js';
import type { CoreContext } from './context.js';

/** The database as /readyz reports it: whether it answers a trivial query, and which engine it is. */
export async function databaseHealth(ctx: CoreContext): Promise<{ ok: boolean; engine: 'sqlite' | 'postgres' }> {
  return { ok: await pingStore(ctx.store), engine: ctx.store.dialect };
}
