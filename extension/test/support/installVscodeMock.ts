/**
 * Makes `require('vscode')` load the mock beside this file. Imported first by every unit test,
 * before any module under test.
 */

import Module = require('node:module');

const mockPath = require.resolve('./vscode');
type Resolve = (request: string, ...rest: unknown[]) => string;
const moduleInternals = Module as unknown as { _resolveFilename: Resolve };
const originalResolve = moduleInternals._resolveFilename;
moduleInternals._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
  return request === 'vscode' ? mockPath : originalResolve.call(this, request, ...rest);
};
