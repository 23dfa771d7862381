import { ulid } from 'ulid';

/** Stable, sortable ids with a type prefix so a reader can tell what an id names. */
export const newId = {
  workspace: () => `ws_${ulid().toLowerCase()}`,
  principal: () => `pr_${ulid().toLowerCase()}`,
  session: () => `se_${ulid().toLowerCase()}`,
  key: () => `tk_${ulid().toLowerCase()}`,
  page: () => `pg_${ulid().toLowerCase()}`,
};

export function nowIso(now: Date = new Date()): string {
  return now.toISOString();
}

/** Sequence numbers (commits, inbox events, thread messages) are 32-bit integers in the database: inputs naming one stay within. */
export const SEQ_MAX = 2_147_483_647;
