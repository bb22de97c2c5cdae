// End-to-end test of the AccelOpt extension in a real editor (code-server), driven by headless
// Chromium through playwright-core. It does what a new user does, in order, and keeps a
// screenshot of every step. scripts/editor_e2e.sh prepares the editor and starts this with:
//   E2E_URL        the workbench URL with the workspace folder
//   E2E_WORKSPACE  the workspace directory (holds silu.py and silu_ref.py)
//   E2E_ARTIFACTS  where screenshots go
//   NODE_PATH      the directory holding playwright-core;  CHROMIUM  the browser binary

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH ?? '.', 'noop.js'));
const { chromium } = require('playwright-core');

const url = requireEnv('E2E_URL');
const workspace = requireEnv('E2E_WORKSPACE');
const artifacts = requireEnv('E2E_ARTIFACTS');
const kernelFile = path.join(workspace, 'silu.py');
const original = readFileSync(kernelFile, 'utf8');

// The machine is shared and slow: waits are generous, but every wait polls for what a person
// would look for and returns as soon as it is there.
const SERVER_READY_MS = 240_000;
const SEARCH_MS = 600_000;
const UI_MS = 30_000;

function requireEnv(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set; run this through scripts/editor_e2e.sh`);
  }
  return value;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--disable-quic',
  ],
});
const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(url).origin });
const page = await context.newPage();
mkdirSync(artifacts, { recursive: true });

let shot = 0;
const timings = [];

/** Runs one user step, times it and keeps a screenshot of what the screen shows afterwards. */
async function step(name, action) {
  const started = Date.now();
  process.stdout.write(`• ${name} … `);
  await action();
  const seconds = (Date.now() - started) / 1000;
  timings.push({ name, seconds });
  shot += 1;
  const file = `${String(shot).padStart(2, '0')}-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}.png`;
  await page.screenshot({ path: path.join(artifacts, file) });
  console.log(`${seconds.toFixed(1)} s  (${file})`);
}

/** Polls `probe` until it returns a truthy value; fails with `what` after `timeoutMs`. */
async function until(what, probe, timeoutMs = UI_MS, intervalMs = 250) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    }
    await page.waitForTimeout(intervalMs);
  }
}

async function toastTexts() {
  return page.locator('.notifications-toasts .notification-toast').allInnerTexts();
}

/** Waits for a notification whose text matches `pattern` and returns that text. */
async function toast(pattern, timeoutMs) {
  return until(
    `a notification matching ${pattern}`,
    async () => (await toastTexts()).find((text) => pattern.test(text)),
    timeoutMs,
  );
}

async function runCommand(title) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: UI_MS });
  await input.fill(`>${title}`);
  const row = page.locator('.quick-input-widget .monaco-list-row', { hasText: title }).first();
  await row.waitFor({ state: 'visible', timeout: UI_MS });
  await input.press('Enter');
}

/** The editor line holding `text`, once it is rendered. */
function editorLine(text) {
  return page.locator('.editor-instance .monaco-editor .view-line', { hasText: text }).first();
}

const sidebar = page.locator('#workbench\\.parts\\.sidebar');
// Candidates are the second level of the Candidates tree (under their kernel), fastest first;
// matched by their speedup so a change of label wording does not break the test.
const candidateRows = sidebar
  .locator('.monaco-list-row[role="treeitem"][aria-level="2"]')
  .filter({ hasText: /\d\.\d\d×/ });
const kernelRow = sidebar.locator('.monaco-list-row[role="treeitem"]', { hasText: 'silu_kernel' }).first();

/** The text of the read-only candidate side of the open diff, as the editor holds it. */
async function diffRightSide() {
  const modified = page.locator('.monaco-diff-editor .editor.modified');
  // (an inline diff also shows the deleted lines there, in zones of their own)
  await modified.locator('.view-lines:not(.line-delete)').click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Control+C');
  return until('the clipboard to hold the candidate', () =>
    page.evaluate(() => navigator.clipboard.readText()),
  );
}

function normalize(text) {
  return text.replace(/\r\n/g, '\n').replace(/\n*$/, '\n');
}

let failed = false;
try {
  await step('workspace opened', async () => {
    await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 120_000 });
    await page.locator('.monaco-workbench').waitFor({ timeout: 120_000 });
    await sidebar.getByText('silu.py', { exact: true }).waitFor({ timeout: 120_000 });
  });

  await step('kernel file opened', async () => {
    const opened = Date.now();
    await page.keyboard.press('Control+P');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible', timeout: UI_MS });
    process.stdout.write(`quick open after ${((Date.now() - opened) / 1000).toFixed(1)} s … `);
    await input.fill('silu.py');
    await page.locator('.quick-input-widget .monaco-list-row', { hasText: 'silu.py' }).first().waitFor();
    process.stdout.write(`listed after ${((Date.now() - opened) / 1000).toFixed(1)} s … `);
    await input.press('Enter');
    await editorLine('def silu_kernel').waitFor({ timeout: UI_MS });
  });

  let lensText = '';
  await step('code lens', async () => {
    const lens = page
      .locator('.editor-instance .codelens-decoration')
      .filter({ hasText: /% of peak/ })
      .first();
    await lens.waitFor({ timeout: SERVER_READY_MS });
    lensText = await lens.innerText();
    assert.match(lensText, /Optimize/, `the code lens offers no Optimize action: ${lensText}`);
  });
  console.log(`  code lens: ${lensText.replace(/\s+/g, ' ')}`);

  let hoverText = '';
  await step('hover', async () => {
    const name = editorLine('def silu_kernel').locator('span > span', { hasText: /^silu_kernel$/ });
    await name.click(); // the cursor in the kernel is what the Optimize command acts on
    await name.hover();
    const hover = page
      .locator('.monaco-hover:visible')
      .filter({ hasText: /of peak/ })
      .first();
    await hover.waitFor({ timeout: UI_MS });
    hoverText = await hover.innerText();
    assert.match(hoverText, /simulated/, `the hover does not say its figures are simulated: ${hoverText}`);
  });
  console.log(`  hover: ${hoverText.replace(/\s+/g, ' ').slice(0, 160)}…`);
  await page.keyboard.press('Escape');

  // The engine timeline: opened from its code lens; a click on a bar moves the cursor to the
  // bar's source line.
  let timelineFrame;
  let clicked;
  await step('timeline', async () => {
    await page
      .locator('.editor-instance .codelens-decoration a', { hasText: /^Timeline$/ })
      .first()
      .click();
    timelineFrame = await until(
      'the timeline webview to draw its bars',
      async () => {
        for (const frame of page.frames()) {
          const count = await frame
            .evaluate(() => globalThis.acceloptTimeline?.barCount?.() ?? 0)
            .catch(() => 0);
          if (count > 0) {
            return frame;
          }
        }
        return undefined;
      },
      SERVER_READY_MS,
    );
    const count = await timelineFrame.evaluate(() => globalThis.acceloptTimeline.barCount());
    // The widest compute-engine bar that no other bar of its lane overlaps (a DMA queue's
    // transfers can overlap, and a click hits the one drawn on top): easy to hit, unambiguous.
    clicked = await timelineFrame.evaluate((n) => {
      const api = globalThis.acceloptTimeline;
      const bars = Array.from({ length: n }, (_, i) => api.barAt(i)).filter(Boolean);
      const clear = (bar) =>
        !bars.some(
          (other) =>
            other !== bar && other.lane === bar.lane && other.start < bar.end && bar.start < other.end,
        );
      let best;
      for (const bar of bars) {
        if (bar.lane < 4 && clear(bar) && (!best || bar.width > best.width)) {
          best = bar;
        }
      }
      return best;
    }, count);
    assert.ok(clicked, 'no bar to click');
    await timelineFrame
      .locator('#timeline')
      .click({ position: { x: clicked.inChartX, y: clicked.inChartY } });
    const cursor = page.locator('.statusbar-item', { hasText: /^Ln \d+, Col \d+/ }).first();
    await until(
      `the cursor to move to line ${clicked.line}`,
      async () =>
        ((await cursor.innerText().catch(() => '')).match(/^Ln (\d+)/)?.[1] ?? '') === String(clicked.line),
    );
  });
  console.log(`  timeline: clicked a bar of line ${clicked.line}; the cursor moved there`);
  // Close it again (a side panel narrows the diff below into its inline form).
  await runCommand('View: Close Editors in Other Groups');

  await step('optimizing', async () => {
    await runCommand('AccelOpt: Optimize Kernel');
    await toast(/optimizing silu_kernel/, UI_MS);
  });

  let searchSummary = '';
  await step('candidates arrive', async () => {
    await page.locator('.activitybar .action-item .action-label[aria-label^="AccelOpt"]').click();
    await page.mouse.move(800, 700); // off the activity bar, so its tooltip does not cover the view
    await candidateRows.first().waitFor({ timeout: SEARCH_MS });
  });

  await step('search finished', async () => {
    searchSummary = await toast(/the search for silu_kernel (finished|reached|stopped early)/, SEARCH_MS);
    await until(
      'the kernel row to stop searching',
      async () => !/searching/.test(await kernelRow.innerText()),
    );
  });
  console.log(
    `  ${searchSummary
      .split('\n')
      .filter((line) => line.startsWith('AccelOpt'))
      .join(' ')}`,
  );
  console.log(`  best candidate: ${(await candidateRows.first().innerText()).replace(/\s+/g, ' ')}`);

  // Make the next search long enough to be worth stopping (many rewrites per iteration, many
  // iterations); the editor picks the workspace settings up while the diff and accept happen.
  mkdirSync(path.join(workspace, '.vscode'), { recursive: true });
  writeFileSync(
    path.join(workspace, '.vscode', 'settings.json'),
    JSON.stringify(
      {
        'accelopt.search.iterations': 40,
        'accelopt.search.beamWidth': 4,
        'accelopt.search.plansPerCandidate': 12,
        'accelopt.search.samplesPerPlan': 2,
      },
      null,
      2,
    ),
  );

  // The search view: the beam tree of the search that just ran, drawn in a webview.
  await step('search view', async () => {
    await editorLine('def silu_kernel')
      .locator('span > span', { hasText: /^silu_kernel$/ })
      .click();
    await runCommand('AccelOpt: Show Search View');
    const drawn = await until(
      'the search view to draw the beam tree',
      async () => {
        for (const frame of page.frames()) {
          const count = await frame
            .evaluate(() => globalThis.acceloptSearchTree?.nodeCount?.() ?? 0)
            .catch(() => 0);
          if (count > 0) {
            return count;
          }
        }
        return 0;
      },
      UI_MS,
    );
    console.log(`  search view: ${drawn} candidates in the tree`);
  });
  await runCommand('View: Close Editors in Other Groups');

  let candidateText = '';
  await step('diff', async () => {
    await candidateRows.first().click();
    await page.locator('.monaco-diff-editor').first().waitFor({ timeout: UI_MS });
    await page
      .locator('.monaco-diff-editor .editor.modified .view-line', { hasText: 'def silu_kernel' })
      .waitFor();
  });

  // Accept one change of the best candidate, not all of it (Accept Some Changes…).
  await step('one change accepted', async () => {
    candidateText = normalize(await diffRightSide());
    assert.notEqual(
      candidateText,
      normalize(original),
      'the candidate side of the diff equals the original file',
    );
    assert.match(candidateText, /def silu_kernel\(/);
    await page.keyboard.press('Control+Home');
    const row = candidateRows.first();
    // The menu may not take a click while it opens: click its item until the pick list shows.
    const changes = page.locator('.quick-input-widget:visible .monaco-list-row');
    await until(
      "the list of the candidate's changes",
      async () => {
        if (
          await changes
            .first()
            .isVisible()
            .catch(() => false)
        ) {
          return true;
        }
        const item = page.locator('.context-view .action-label', { hasText: 'Accept Some Changes' }).first();
        if (await item.isVisible().catch(() => false)) {
          await item.click().catch(() => undefined);
        } else {
          await row.click({ button: 'right' });
        }
        return false;
      },
      UI_MS,
      500,
    );
    const count = await changes.count();
    await changes.first().click(); // in a multi-select list, a click on a row ticks it
    await page.locator('.quick-input-widget:visible', { hasText: '1 Selected' }).waitFor({ timeout: UI_MS });
    await page.locator('.quick-input-widget:visible .monaco-button', { hasText: /^OK$/ }).first().click();
    await toast(/AccelOpt: applied/, UI_MS);
    const onDisk = await until('silu.py on disk to change', () => {
      const text = readFileSync(kernelFile, 'utf8');
      return text !== original && text;
    });
    // Only lines of the original or of the candidate, and with several changes offered, not the
    // whole candidate: one change went in.
    for (const line of normalize(onDisk).split('\n')) {
      assert.ok(original.includes(line) || candidateText.includes(line), `a line from nowhere: ${line}`);
    }
    if (count > 1) {
      assert.notEqual(normalize(onDisk), candidateText, 'every change was applied, not one');
    }
    console.log(`  ${count} changes offered; one applied`);
    const tab = page.locator('.tabs-container .tab', { hasText: /^silu\.py/ }).first();
    await until(
      'the accepted file to be saved',
      async () => !(await tab.getAttribute('class')).includes('dirty'),
    );
  });

  await step('cancelling', async () => {
    await page
      .locator('.tabs-container .tab', { hasText: /^silu\.py/ })
      .first()
      .click();
    // Search the original kernel again. What is left to search after the accepted rewrite
    // depends on which of two equally fast candidates came first (the fused kernel leaves
    // little), and a short search can end before it can be cancelled.
    writeFileSync(kernelFile, original);
    await runCommand('File: Revert File');
    const originalOnly = original
      .split('\n')
      .map((line) => line.trim())
      .find((line) => line && !candidateText.includes(line));
    assert.ok(originalOnly, 'the accepted candidate holds every line of the original');
    await page.keyboard.press('Control+Home');
    await editorLine(originalOnly).waitFor({ timeout: UI_MS });
    // The first search's closing message may still be on screen: clear it, so that a "finished"
    // message seen from here on can only belong to the second search.
    await runCommand('Notifications: Clear All Notifications');
    await until('the old notifications to close', async () => (await toastTexts()).length === 0);
    await editorLine('def silu_kernel')
      .locator('span > span', { hasText: /^silu_kernel$/ })
      .click();
    await runCommand('AccelOpt: Optimize Kernel');
    const progress = page.locator('.notifications-toasts .notification-toast', {
      hasText: /optimizing silu_kernel/,
    });
    await progress.waitFor({ timeout: UI_MS });
    // Stop it once it is really searching: an iteration is under way.
    await until(
      'the second search to start iterating',
      async () => {
        const texts = await toastTexts();
        const ended = texts.find((text) => /the search for silu_kernel/.test(text));
        assert.equal(ended, undefined, `the second search ended before it could be cancelled: ${ended}`);
        return texts.some((text) => /optimizing silu_kernel[\s\S]*iteration \d+ of 40/.test(text));
      },
      SERVER_READY_MS,
    );
    await progress.hover();
    await progress.getByRole('button', { name: 'Cancel' }).click();
  });

  await step('stopped', async () => {
    await toast(/stopped the search for silu_kernel/, 60_000);
    await until('the progress notification to close', async () =>
      (await toastTexts()).every((text) => !/optimizing silu_kernel/.test(text)),
    );
    await until(
      'the kernel row to stop searching',
      async () => !/searching/.test(await kernelRow.innerText()),
    );
    const lens = page
      .locator('.editor-instance .codelens-decoration')
      .filter({ hasText: /of peak/ })
      .first();
    await until(
      'the code lens to stop saying Optimizing',
      async () => !/Optimizing/.test(await lens.innerText()),
    );
  });
} catch (error) {
  failed = true;
  console.log('FAILED');
  console.error(error);
  await page.screenshot({ path: path.join(artifacts, 'failure.png') }).catch(() => undefined);
  console.error(`notifications on screen: ${JSON.stringify(await toastTexts().catch(() => []))}`);
} finally {
  await browser.close();
}

const total = timings.reduce((sum, { seconds }) => sum + seconds, 0);
console.log(`editor e2e steps took ${total.toFixed(1)} s in all`);
process.exit(failed ? 1 : 0);
