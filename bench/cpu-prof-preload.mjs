/**
 * `NODE_OPTIONS=--import=<this file>` with CV_CPU_PROF_DIR set: records a V8 CPU profile of the
 * process and writes it there at exit (Node 20 refuses --cpu-prof in NODE_OPTIONS). Used by
 * bench/git.ts --cpu-prof=DIR to see where the service's time goes.
 */
import fs from 'node:fs';
import inspector from 'node:inspector';
import path from 'node:path';

const dir = process.env.CV_CPU_PROF_DIR;
if (dir) {
  const session = new inspector.Session();
  session.connect();
  session.post('Profiler.enable');
  session.post('Profiler.setSamplingInterval', { interval: 500 });
  session.post('Profiler.start');
  process.on('exit', () => {
    // A same-thread session answers synchronously, so this runs before the process is gone.
    session.post('Profiler.stop', (err, res) => {
      if (!err) fs.writeFileSync(path.join(dir, `service-${process.pid}.cpuprofile`), JSON.stringify(res.profile));
    });
  });
}
