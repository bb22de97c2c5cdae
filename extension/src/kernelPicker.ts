/**
 * Which kernel "Optimize Kernel" means when it is run from the command palette: the `@nki.jit`
 * (or `@nki.baremetal`, …) function around the cursor, else the only one in the file, else the
 * one the user picks. The server finds kernels properly for its code lenses; this light scan only
 * has to name a function that the server then checks.
 */

export interface KernelLocation {
  readonly name: string;
  /** 0-based line of the first decorator. */
  readonly startLine: number;
  /** 0-based last line of the body. */
  readonly endLine: number;
}

const KERNEL_DECORATORS = new Set(['jit', 'baremetal', 'benchmark', 'profile', 'simulate_kernel']);
const DECORATOR = /^(\s*)@\s*([A-Za-z_][\w.]*)/;
const DEF = /^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(/;

function indentOf(line: string): number {
  return /^\s*/.exec(line)?.[0].length ?? 0;
}

function isCode(line: string): boolean {
  const trimmed = line.trim();
  return trimmed !== '' && !trimmed.startsWith('#');
}

export function findKernels(text: string): KernelLocation[] {
  const lines = text.split(/\r?\n/);
  const kernels: KernelLocation[] = [];
  let firstDecorator = -1;
  let kernelDecorated = false;
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index];
    const decorator = DECORATOR.exec(line);
    if (decorator) {
      if (firstDecorator < 0) {
        firstDecorator = index;
      }
      kernelDecorated ||= KERNEL_DECORATORS.has(decorator[2].split('.').pop() ?? '');
      continue;
    }
    const def = DEF.exec(line);
    if (def && kernelDecorated) {
      const indent = def[1].length;
      let end = index;
      for (let next = index + 1; next < lines.length; next++) {
        if (!isCode(lines[next])) {
          continue;
        }
        if (indentOf(lines[next]) <= indent) {
          break;
        }
        end = next;
      }
      kernels.push({ name: def[2], startLine: firstDecorator, endLine: end });
    }
    // A def, or a statement at the left margin (not the `)` closing a decorator's arguments),
    // ends a run of decorators.
    if (def || (isCode(line) && indentOf(line) === 0 && !/^[)\]]/.test(line))) {
      firstDecorator = -1;
      kernelDecorated = false;
    }
  }
  return kernels;
}

/** The kernel whose decorators or body hold the line, if any. */
export function kernelAtLine(kernels: readonly KernelLocation[], line: number): KernelLocation | undefined {
  return kernels.find((kernel) => kernel.startLine <= line && line <= kernel.endLine);
}
