/**
 * One MCP tool call over raw HTTP, stateless (no initialize): what the attack suites send to
 * see exactly what a hostile client gets back. Answers in JSON or as one server-sent event.
 */
export async function mcpCall(
  base: string,
  key: string,
  name: string,
  args: Record<string, unknown>,
): Promise<{ status: number; isError: boolean; text: string }> {
  const res = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } }),
  });
  const text = await res.text();
  let isError = res.status !== 200;
  try {
    const j = JSON.parse(text.startsWith('event:') || text.startsWith('data:') ? text.replace(/^[\s\S]*?data: /, '') : text) as {
      result?: { isError?: boolean };
      error?: unknown;
    };
    if (j.error || j.result?.isError) isError = true;
  } catch {
    isError = true;
  }
  return { status: res.status, isError, text };
}
