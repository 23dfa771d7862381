import { runCli, usage } from './cli/index.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { hasAnyHuman } from './core/accounts.js';
import { startServer } from './server.js';
import { openStore } from './store/db.js';

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
    const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, cacheMb: config.sqliteCacheMb });
    await store.close();
    console.log('migrations applied');
    return;
  }
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(config);
  } catch (e) {
    // Some settings (ALLOWED_HOSTS entries) are checked when the app is built.
    if (e instanceof ConfigError) {
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
  const stop = (signal: string) => {
    if (closing) return;
    closing = true;
    server.app.log.info(`${signal}: shutting down`);
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
