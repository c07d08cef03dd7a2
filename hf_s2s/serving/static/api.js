// The explorer's calls to this server's API (paths relative to the page, so a reverse proxy's path prefix is kept):
// each can be cancelled, and gives up after a timeout, so that nothing waits forever.

export const TIMEOUT_SECONDS = 120;

// The outcome of a call: {ok: true, body} for a 2xx answer; {ok: false, kind, status, title, message, body} otherwise,
// kind being "refused" (a 4xx/5xx answer, with the server's own message), "unreachable", "cancelled" or "timeout".
export async function call(path, body, { signal, timeoutSeconds = TIMEOUT_SECONDS } = {}) {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; controller.abort(); }, timeoutSeconds * 1000);
  const cancel = () => controller.abort();
  if (signal) {
    if (signal.aborted) cancel();
    signal.addEventListener("abort", cancel);
  }
  let response, answer;
  try {
    response = await fetch(path, body === undefined ? { signal: controller.signal } : {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
      signal: controller.signal,
    });
    answer = await response.json().catch(() => ({ error: "the answer was not JSON" }));
  } catch (error) {
    if (timedOut) {
      return { ok: false, kind: "timeout", title: `No answer after ${timeoutSeconds} s:`,
               message: "the request was cancelled. The server may be busy; try fewer sentences or try again." };
    }
    if (controller.signal.aborted) return { ok: false, kind: "cancelled", title: "Cancelled:", message: "" };
    return { ok: false, kind: "unreachable", title: "The server could not be reached:", message: String(error) };
  } finally {
    clearTimeout(timer);
    if (signal) signal.removeEventListener("abort", cancel);
  }
  if (!response.ok) {
    const reason = response.statusText ? ` ${response.statusText}` : "";
    return { ok: false, kind: "refused", status: response.status, body: answer,
             title: `The server refused the request (${response.status}${reason}):`, message: answer.error || "" };
  }
  return { ok: true, body: answer };
}
