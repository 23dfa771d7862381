import { runCli, usage } from './cli/index.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { hasAnyHuman } from './core/accounts.js';
import { SHUTDOWN_GRACE_MS, startServer } from './server.js';
import { openStore } from './store/db.js';
import { SchemaAheadError } from './store/migrate.js';

/** After the requests' grace, how long the jobs' batches in hand and the store may take to stop. */
const SHUTDOWN_JOBS_MS = 60_000;

async function main(argv: string[]): Promise<void> {
  const command = argv[0] ?? 'serve';
  // Every other word is an operator's command (src/cli/): it exits with that command's code.
  if (command !== 'serve' && command !== 'migrate') {
    process.exitCode = await runCli(argv);
    return;
  }
  if (argv.length > 1) {
    if (argv[1] === '--help' || argv[1] === '-h') {
      console.log(usage());
      return;
    }
    console.error(`context-vault ${command}: unexpected argument ${JSON.stringify(argv[1])}\n\n${usage()}`);
    process.exit(2);
  }
  let config: Config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(e.message);
      process.exit(2);
    }
    throw e;
  }
  if (command === 'migrate') {
    try {
      const store = await openStore({
        dataDir: config.dataDir,
        databaseUrl: config.databaseUrl,
        cacheMb: config.sqliteCacheMb,
        poolMax: config.databasePoolMax,
      });
      await store.close();
    } catch (e) {
      if (e instanceof SchemaAheadError) {
        console.error(e.message);
        process.exit(2);
      }
      throw e;
    }
    console.log('migrations applied');
    return;
  }
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(config);
  } catch (e) {
    // Some settings (ALLOWED_HOSTS entries) are checked when the app is built; a database a newer
    // version migrated is refused before anything is served.
    if (e instanceof ConfigError || e instanceof SchemaAheadError) {
      console.error(e.message);
      process.exit(2);
    }
    throw e;
  }
  server.app.log.info(
    { engine: server.ctx.store.dialect, dataDir: config.databaseUrl ? undefined : config.dataDir, signups: config.signups },
    `Context Vault listening on ${server.url}`,
  );
  if (config.signups === 'invite' && !(await hasAnyHuman(server.ctx))) {
    server.app.log.warn('SIGNUPS=invite and no account exists yet: the FIRST sign-up is open and becomes the first owner; sign up now');
  }
  let closing = false;
  // SIGTERM (an orchestrator's stop, a rolling restart) or Ctrl+C: refuse new connections, answer
  // what is in flight (at most SHUTDOWN_GRACE_MS), end long-polls with their empty answer, give
  // back job leases so another node takes the jobs over at once, close the database, exit 0.
  const stop = (signal: string) => {
    if (closing) {
      // A second signal means "now": whatever was not answered was not acknowledged.
      server.app.log.warn(`${signal} again: exiting without waiting`);
      process.exit(1);
    }
    closing = true;
    server.app.log.info(`${signal}: shutting down (requests in flight get up to ${SHUTDOWN_GRACE_MS / 1000} s)`);
    // A job's batch in hand or the database hanging must not keep the process forever.
    setTimeout(() => {
      server.app.log.error('shutdown did not finish in time; exiting');
      process.exit(1);
    }, SHUTDOWN_GRACE_MS + SHUTDOWN_JOBS_MS).unref();
    server.close().then(
      () => process.exit(0),
      (err) => {
        console.error(err);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main(process.argv.slice(2)).catch((err) => {
  console.error(err);
  process.exit(1);
});
