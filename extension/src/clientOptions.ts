/**
 * How the language client is set up: which documents go to the server, the settings it starts
 * with, and the middleware that keeps the two configuration paths identical and routes the
 * server's commands through the client (see clientCommands.ts).
 */

import type * as vscode from 'vscode';
import type { LanguageClientOptions, Middleware } from 'vscode-languageclient/node';

import { redirectCommand, redirectCommandsOf } from './clientCommands';
import { configurationSection, type ClientSettings, type ServerConfiguration } from './settings';

export function buildClientOptions(
  settings: ClientSettings,
  output: vscode.OutputChannel,
  currentServerSettings: () => ServerConfiguration,
): LanguageClientOptions {
  return {
    documentSelector: [
      { scheme: 'file', language: 'python' },
      { scheme: 'untitled', language: 'python' },
    ],
    outputChannel: output,
    initializationOptions: settings.server,
    middleware: middleware(currentServerSettings),
  };
}

function middleware(currentServerSettings: () => ServerConfiguration): Middleware {
  return {
    provideCodeLenses: async (document, token, next) => redirectCommandsOf(await next(document, token)),
    resolveCodeLens: async (lens, token, next) => {
      const resolved = await next(lens, token);
      redirectCommand(resolved?.command);
      return resolved;
    },
    provideCodeActions: async (document, range, context, token, next) =>
      redirectCommandsOf(await next(document, range, context, token)),
    resolveCodeAction: async (action, token, next) => {
      const resolved = await next(action, token);
      redirectCommand(resolved?.command);
      return resolved;
    },
    workspace: {
      // Answer with the same object as initializationOptions, read fresh from the settings.
      configuration: async (params, token, next) => {
        const answers = await next(params, token);
        if (!Array.isArray(answers)) {
          return answers; // an error from the editor: pass it on
        }
        const server = currentServerSettings();
        return params.items.map(
          (item, index) => configurationSection(server, item.section) ?? answers[index],
        );
      },
    },
  };
}
