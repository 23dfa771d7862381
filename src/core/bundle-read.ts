import type { Principal } from '../policy/principal.js';
import { buildBundle, type Bundle, type BundleOptions } from '../retrieval/bundle.js';
import type { CoreContext } from './context.js';

/**
 * A context bundle as a read (issue 16): every page a section of the bundle came from is touched
 * (`last_touched_at`), as GET /nodes/:id and context_get / fetch touch theirs, so content that
 * agents keep pulling through bundles never looks stale to the lifecycle job. Retrieval builds
 * the bundle and knows nothing of touches; the faces call this instead of buildBundle.
 */
export async function readBundle(ctx: CoreContext, p: Principal, opts: BundleOptions, now = new Date()): Promise<Bundle> {
  const bundle = await buildBundle(ctx, p, opts);
  const at = now.toISOString();
  for (const id of new Set(bundle.sections.map((s) => s.id))) ctx.touches.touch(id, at);
  return bundle;
}
