/**
 * The server's code lenses and code actions name server commands (`accelopt.optimize`,
 * `accelopt.applyCandidate`, `accelopt.rejectCandidate`). Run as they are, they would start a
 * search with no progress notification, or apply an edit with nobody to report a stale document.
 * The client's middleware points them at the client's own commands, which do the same through the
 * server but with the editor around them. Arguments are kept as they are.
 */

export const ClientCommands = {
  optimizeKernel: 'accelopt.optimizeKernel',
  stopSearch: 'accelopt.stopSearch',
  showDiff: 'accelopt.candidate.showDiff',
  accept: 'accelopt.candidate.accept',
  reject: 'accelopt.candidate.reject',
  refreshMemory: 'accelopt.memory.refresh',
  restartServer: 'accelopt.restartServer',
  showLog: 'accelopt.showLog',
  setApiKey: 'accelopt.setApiKey',
  clearApiKey: 'accelopt.clearApiKey',
  showTimeline: 'accelopt.showTimeline',
  showSearchTree: 'accelopt.showSearchTree',
  acceptHunks: 'accelopt.candidate.acceptHunks',
} as const;

const REDIRECTS: Record<string, string> = {
  'accelopt.optimize': ClientCommands.optimizeKernel,
  'accelopt.applyCandidate': ClientCommands.accept,
  'accelopt.rejectCandidate': ClientCommands.reject,
};

interface CommandLike {
  command: string;
}

/** Rewrites a server command to the client's own, in place; other commands pass untouched. */
export function redirectCommand<T extends CommandLike | undefined>(command: T): T {
  if (command && Object.prototype.hasOwnProperty.call(REDIRECTS, command.command)) {
    command.command = REDIRECTS[command.command];
  }
  return command;
}

/**
 * For code lenses and code actions: each item is either a command itself (`{title, command: string}`)
 * or carries one (`{command?: Command}`).
 */
export function redirectCommandsOf<T>(items: T[] | null | undefined): T[] | null | undefined {
  for (const item of items ?? []) {
    const command = (item as { command?: unknown }).command;
    if (typeof command === 'string') {
      redirectCommand(item as unknown as CommandLike);
    } else if (command && typeof command === 'object') {
      redirectCommand(command as CommandLike);
    }
  }
  return items;
}
