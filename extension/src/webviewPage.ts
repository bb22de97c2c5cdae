/**
 * The HTML page of an AccelOpt webview: nothing loads but our own bundled script (allowed by a
 * fresh nonce), no inline script, no network; colours and fonts from the editor's theme.
 */

import type * as vscode from 'vscode';

function nonce(): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from({ length: 32 }, () => chars[Math.floor(Math.random() * chars.length)]).join('');
}

/** `charts`: the ids and heights (px) of the chart containers, in order. */
export function webviewPage(
  webview: vscode.Webview,
  script: vscode.Uri,
  heading: string,
  charts: readonly [string, number][],
): string {
  const id = nonce();
  const csp = [
    "default-src 'none'",
    `script-src 'nonce-${id}'`,
    `style-src ${webview.cspSource} 'unsafe-inline'`,
    `img-src ${webview.cspSource} data:`,
  ].join('; ');
  const containers = charts.map(([chart]) => `<div id="${chart}" class="chart"></div>`).join('\n');
  const heights = charts.map(([chart, px]) => `#${chart} { height: ${px}px; }`).join('\n  ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<style>
  body { color: var(--vscode-editor-foreground); background: var(--vscode-editor-background);
         font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); margin: 0 12px; }
  h2 { font-size: 1.2em; margin: 10px 0 2px; }
  #subtitle { color: var(--vscode-descriptionForeground); margin-bottom: 8px; }
  .chart { margin-top: 12px; }
  ${heights}
</style>
</head>
<body>
<h2 id="title">${heading}</h2>
<div id="subtitle">loading…</div>
${containers}
<script nonce="${id}" src="${webview.asWebviewUri(script).toString()}"></script>
</body>
</html>`;
}
