import { UsageError } from './args.js';

/**
 * What the commands show. Results go to stdout (a line for people, or one JSON document with
 * `--json`); progress goes to stderr and only when stderr is a terminal: in a pipe or a log a
 * command prints nothing but its final summary.
 */
export function emit(json: boolean, value: unknown, text: string): void {
  process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${text}\n`);
}

/** A one-line progress bar on a terminal's stderr; silent anywhere else. */
export class ProgressBar {
  private readonly tty: boolean;
  private lastDraw = 0;
  private drawn = false;
  private readonly started = Date.now();

  constructor(
    private readonly label: string,
    stream: { isTTY?: boolean } = process.stderr,
  ) {
    this.tty = Boolean(stream.isTTY);
  }

  update(done: number, total: number, note = ''): void {
    if (!this.tty) return;
    const now = Date.now();
    if (now - this.lastDraw < 100 && done < total) return;
    this.lastDraw = now;
    const width = 30;
    const frac = total > 0 ? Math.min(1, done / total) : 1;
    const filled = Math.round(frac * width);
    const secs = Math.round((now - this.started) / 1000);
    const line = `${this.label} [${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${Math.floor(frac * 100)}% ${done}/${total} ${secs}s ${note}`;
    const cols = process.stderr.columns || 100;
    process.stderr.write(`\r${line.slice(0, cols - 1)}\x1b[K`);
    this.drawn = true;
  }

  /** Clears the bar so the summary starts on a clean line. */
  end(): void {
    if (this.tty && this.drawn) process.stderr.write('\r\x1b[K');
    this.drawn = false;
  }
}

/** Reads the first line of a piped stdin (the rest is ignored). */
async function readPipedLine(): Promise<string> {
  let data = '';
  for await (const chunk of process.stdin) {
    data += String(chunk);
    if (data.includes('\n')) break;
  }
  const nl = data.indexOf('\n');
  return (nl >= 0 ? data.slice(0, nl) : data).replace(/\r$/, '');
}

/** Prompts on the terminal without echoing what is typed. */
async function promptHidden(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  stdin.setRawMode(true);
  stdin.resume();
  stdin.setEncoding('utf8');
  try {
    return await new Promise<string>((resolve, reject) => {
      let value = '';
      const onData = (s: string) => {
        for (const ch of s) {
          if (ch === '\r' || ch === '\n') {
            stdin.off('data', onData);
            process.stderr.write('\n');
            resolve(value);
            return;
          }
          if (ch === '\u0003' || ch === '\u0004') {
            stdin.off('data', onData);
            process.stderr.write('\n');
            reject(new UsageError('cancelled'));
            return;
          }
          if (ch === '\u007f' || ch === '\b') value = value.slice(0, -1);
          else value += ch;
        }
      };
      stdin.on('data', onData);
    });
  } finally {
    stdin.setRawMode(false);
    stdin.pause();
  }
}

/**
 * A password, never from the command line: typed at a terminal (asked twice, not echoed), or the
 * first line of stdin when stdin is a pipe (`--password-stdin` says so explicitly).
 */
export async function readPassword(what: string): Promise<string> {
  let value: string;
  if (process.stdin.isTTY) {
    value = await promptHidden(`${what}: `);
    const again = await promptHidden(`${what} (again): `);
    if (again !== value) throw new UsageError('the two passwords differ');
  } else {
    value = await readPipedLine();
  }
  if (value.length === 0) throw new UsageError('no password given (type it at the prompt, or pipe it on stdin with --password-stdin)');
  return value;
}
