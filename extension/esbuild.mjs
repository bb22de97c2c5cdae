// Bundles the extension into one file (dist/extension.js) so the .vsix needs no node_modules.
// `node extension/esbuild.mjs [--production] [--watch]`
import * as esbuild from 'esbuild';

const production = process.argv.includes('--production');
const watch = process.argv.includes('--watch');

const options = {
  entryPoints: ['extension/src/extension.ts'],
  bundle: true,
  outfile: 'dist/extension.js',
  external: ['vscode'], // provided by the editor at run time
  platform: 'node',
  format: 'cjs',
  target: 'node18',
  sourcemap: !production,
  minify: production,
  logLevel: 'info',
};

// The views' page scripts, with the chart library bundled in (webviews load nothing else).
const webview = {
  entryPoints: ['extension/webview/timeline.ts', 'extension/webview/searchTree.ts'],
  bundle: true,
  outdir: 'dist/webview',
  platform: 'browser',
  format: 'iife',
  target: 'es2022',
  sourcemap: !production,
  minify: production,
  logLevel: 'info',
};

if (watch) {
  for (const build of [options, webview]) {
    const context = await esbuild.context(build);
    await context.watch();
  }
} else {
  await Promise.all([esbuild.build(options), esbuild.build(webview)]);
}
