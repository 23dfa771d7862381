// Headers for the page scripts' calls to the REST API (served as /assets/api.js). The app may
// show another workspace than the session's own (the switcher's cookie is for /app only), so the
// REST calls name the shown one, as any API client would, with X-Service-Workspace; the server
// checks membership on every request.

export function apiHeaders() {
  const headers = { accept: 'application/json' };
  const shown = document.querySelector('form.ws-switch')?.dataset.workspace;
  if (shown) headers['x-service-workspace'] = shown;
  return headers;
}
