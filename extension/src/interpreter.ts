/**
 * Which Python runs the server, and whether it can: the way Python tool extensions choose.
 *
 * Order: the `accelopt.pythonPath` setting when the user filled it in (an explicit choice wins),
 * else the interpreter selected in the Python extension, else `python3` on PATH. Before starting
 * the server, `python -c "import accelopt"` proves the package is there; when it is not, the
 * message names the interpreter, where it came from, and the command that fixes it.
 */

import { execFile } from 'node:child_process';

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface Interpreter {
  readonly command: string;
  readonly source: InterpreterSource;
}

export interface InterpreterSources {
  /** The expanded `accelopt.pythonPath`, undefined when empty. */
  setting(): string | undefined;
  /** The Python extension's active interpreter, undefined when it is not installed or has none. */
  pythonExtension(): Promise<string | undefined>;
}

export const DEFAULT_PYTHON = 'python3';

export async function resolveInterpreter(sources: InterpreterSources): Promise<Interpreter> {
  const fromSetting = sources.setting();
  if (fromSetting) {
    return { command: fromSetting, source: 'setting' };
  }
  let fromExtension: string | undefined;
  try {
    fromExtension = await sources.pythonExtension();
  } catch {
    fromExtension = undefined; // a broken Python extension must not keep AccelOpt from starting
  }
  if (fromExtension) {
    return { command: fromExtension, source: 'python-extension' };
  }
  return { command: DEFAULT_PYTHON, source: 'default' };
}

export type ImportCheck =
  | { readonly ok: true; readonly location: string }
  | {
      readonly ok: false;
      readonly problem: 'no-interpreter' | 'no-package' | 'broken';
      readonly detail: string;
    };

// Prints where the package lives, so the log shows which checkout the server runs from.
const PROBE = 'import accelopt, os; print(os.path.dirname(accelopt.__file__))';

/** Runs `python -c "import accelopt"` in a real subprocess. */
export function checkAcceloptImport(python: string, timeoutMs = 30_000): Promise<ImportCheck> {
  return new Promise((resolve) => {
    execFile(python, ['-c', PROBE], { timeout: timeoutMs, windowsHide: true }, (error, stdout, stderr) => {
      if (!error) {
        resolve({ ok: true, location: stdout.trim() });
        return;
      }
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EACCES') {
        resolve({ ok: false, problem: 'no-interpreter', detail: error.message });
      } else if (/ModuleNotFoundError: No module named 'accelopt'/.test(stderr)) {
        resolve({ ok: false, problem: 'no-package', detail: lastLine(stderr) });
      } else {
        resolve({ ok: false, problem: 'broken', detail: stderr.trim() || error.message });
      }
    });
  });
}

function lastLine(text: string): string {
  const lines = text.trim().split(/\r?\n/);
  return lines[lines.length - 1] ?? '';
}

function describeSource(source: InterpreterSource): string {
  switch (source) {
    case 'setting':
      return 'from the setting accelopt.pythonPath';
    case 'python-extension':
      return 'selected in the Python extension';
    case 'default':
      return 'the default, as neither accelopt.pythonPath nor the Python extension names one';
  }
}

/** One message a person can act on: what is wrong, with which interpreter, and the fix. */
export function explainImportFailure(
  interpreter: Interpreter,
  check: Exclude<ImportCheck, { ok: true }>,
): string {
  const which = `\`${interpreter.command}\` (${describeSource(interpreter.source)})`;
  switch (check.problem) {
    case 'no-interpreter':
      return (
        `AccelOpt cannot start its server: there is no Python interpreter at ${which}. ` +
        'Set accelopt.pythonPath to a Python 3.10+ interpreter that has AccelOpt installed.'
      );
    case 'no-package':
      return (
        `AccelOpt cannot start its server: the Python interpreter ${which} does not have the accelopt package. ` +
        `Install it there with \`${interpreter.command} -m pip install -e <your AccelOpt checkout>\`, ` +
        "or set accelopt.pythonPath to an interpreter that has it (for example the checkout's .venv/bin/python)."
      );
    case 'broken':
      return (
        `AccelOpt cannot start its server: importing accelopt with ${which} failed. ` +
        'The server log has the Python error; reinstalling the package usually fixes it.'
      );
  }
}
