import net from 'node:net';

/** A request written by hand whose head is not finished yet: the server holds it but cannot act on it. */
export interface HalfSentRequest {
  /** Everything the server has answered so far. */
  text(): string;
  /** Sends the rest (by default the blank line that ends the head). */
  finish(rest?: string): void;
  /** Resolves when the server has closed the connection. */
  ended: Promise<void>;
}

/** Opens a connection and sends `head` (request line and headers, each ending in CRLF) plus Host, without the final blank line. */
export async function halfSentRequest(url: string, head: string): Promise<HalfSentRequest> {
  const u = new URL(url);
  const socket = net.connect(Number(u.port), u.hostname);
  await new Promise<void>((r) => socket.once('connect', () => r()));
  let raw = '';
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (raw += d));
  const ended = new Promise<void>((r) => socket.once('close', () => r()));
  socket.write(`${head}Host: ${u.host}\r\n`);
  return { text: () => raw, finish: (rest = '\r\n') => socket.write(rest), ended };
}
