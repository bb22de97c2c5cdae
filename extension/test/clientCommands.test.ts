import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { ClientCommands, redirectCommand, redirectCommandsOf } from '../src/clientCommands';

describe('server commands in code lenses and code actions', () => {
  it("point Optimize, Apply and Reject at the client's own commands, keeping the arguments", () => {
    const lenses = [
      { range: 1, command: { title: '61% of peak · HBM-bound', command: '' } },
      {
        range: 2,
        command: {
          title: 'Optimize',
          command: 'accelopt.optimize',
          arguments: ['file:///k.py', 'silu_kernel'],
        },
      },
      { range: 3 },
    ];
    redirectCommandsOf(lenses);
    assert.deepEqual(lenses[1].command, {
      title: 'Optimize',
      command: ClientCommands.optimizeKernel,
      arguments: ['file:///k.py', 'silu_kernel'],
    });
    assert.equal(lenses[0].command?.command, '', 'other commands are untouched');

    const actions: unknown[] = [
      {
        title: 'Apply candidate 1',
        kind: 'refactor.rewrite',
        command: { title: 'Apply', command: 'accelopt.applyCandidate', arguments: ['s', 'c'] },
      },
      { title: 'Reject', command: 'accelopt.rejectCandidate', arguments: ['s', 'c'] },
      { title: 'Other', command: 'python.sortImports' },
    ];
    redirectCommandsOf(actions);
    assert.equal((actions[0] as { command: { command: string } }).command.command, ClientCommands.accept);
    assert.equal((actions[1] as { command: string }).command, ClientCommands.reject);
    assert.equal((actions[2] as { command: string }).command, 'python.sortImports');
  });

  it('leaves nothing to rewrite alone', () => {
    assert.equal(redirectCommand(undefined), undefined);
    assert.equal(redirectCommandsOf(null), null);
    assert.deepEqual(
      redirectCommand({ command: 'toString' }),
      { command: 'toString' },
      'no prototype lookups',
    );
  });
});
