import type { ImportJob } from '../core/import/jobs.js';

/** An import as REST (and the command line) shows it: progress and, once done, its report. */
export function importView(job: ImportJob) {
  return {
    id: job.id,
    status: job.status,
    space: job.space,
    total: job.total,
    done: job.done,
    ...job.report,
    error: job.error,
    created_at: job.created_at,
    started_at: job.started_at,
    finished_at: job.finished_at,
    status_url: `/api/v1/import/${job.id}`,
  };
}
