/**
 * What every AccelOpt webview page does alike: talk to the extension, read the editor's theme,
 * redraw on a new model and on resize.
 */

interface VsCodeApi {
  postMessage(message: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

/** The extension's end of the page (acquired once per page, as the webview API requires). */
export const host = acquireVsCodeApi();

export function themeColor(name: string, fallback: string): string {
  return getComputedStyle(document.body).getPropertyValue(name).trim() || fallback;
}

/** Calls `draw` with each model the extension sends, resizes `charts` with the window, and
 * tells the extension the page is ready. */
export function serve<T>(draw: (model: T) => void, charts: readonly { resize(): void }[]): void {
  window.addEventListener('message', (event: MessageEvent) => {
    const message = event.data as { type?: string; model?: T };
    if (message.type === 'model' && message.model) {
      draw(message.model);
    }
  });
  window.addEventListener('resize', () => {
    for (const chart of charts) {
      chart.resize();
    }
  });
  host.postMessage({ type: 'ready' });
}
