/**
 * How numbers and states read in the editor. Pure functions, shared by the trees, the progress
 * notification and the messages, so the same figure always reads the same way.
 */

/** "1.84×", or "0.93× (slower)" when the candidate lost time (as far as two decimals show). */
export function formatSpeedup(speedup: number | null | undefined): string {
  if (speedup === null || speedup === undefined || !Number.isFinite(speedup)) {
    return 'no timing';
  }
  const text = `${speedup.toFixed(2)}×`;
  return Number(speedup.toFixed(2)) < 1 ? `${text} (slower)` : text;
}

/** A speedup in a sentence: "1.84× faster", "1.00× (no faster)", "0.93× (slower)". */
export function speedupPhrase(speedup: number | null | undefined): string {
  if (speedup === null || speedup === undefined || !Number.isFinite(speedup)) {
    return 'no timing';
  }
  const text = `${speedup.toFixed(2)}×`;
  if (isFaster(speedup)) {
    return `${text} faster`;
  }
  return Number(speedup.toFixed(2)) < 1 ? `${text} (slower)` : `${text} (no faster)`;
}

/** Faster by a margin that shows in the figure (1.004 reads "1.00×": not faster). */
export function isFaster(speedup: number | null | undefined): boolean {
  return (
    speedup !== null && speedup !== undefined && Number.isFinite(speedup) && Number(speedup.toFixed(2)) > 1
  );
}

/** Percent of roofline peak from the protocol's fraction: 0.612 -> "61% of peak". */
export function formatPercentOfPeak(fraction: number | null | undefined): string | undefined {
  if (fraction === null || fraction === undefined || !Number.isFinite(fraction)) {
    return undefined;
  }
  const percent = fraction * 100;
  const digits = percent < 10 ? 1 : 0;
  return `${percent.toFixed(digits)}% of peak`;
}

export function formatLatency(ms: number | null | undefined): string | undefined {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) {
    return undefined;
  }
  if (ms < 1) {
    return `${(ms * 1000).toFixed(1)} µs`;
  }
  return `${ms.toFixed(3)} ms`;
}

export function formatDollars(dollars: number): string {
  return dollars < 0.01 && dollars > 0 ? `$${dollars.toFixed(4)}` : `$${dollars.toFixed(2)}`;
}

/** Says which backend produced a figure: "simulated on trn1" or "measured on trn2". */
export function measuredOn(backend: string, hardware: string): string {
  const verb = backend === 'simulator' ? 'simulated' : backend === 'neuron' ? 'measured' : `${backend}`;
  return hardware ? `${verb} on ${hardware}` : verb;
}

const STATUS_LABELS: Record<string, string> = {
  ok: 'correct',
  pending: 'evaluating…',
  syntax_error: 'syntax error',
  compile_error: 'breaks an NKI rule',
  runtime_error: 'crashed',
  incorrect: 'wrong results',
  timeout: 'timed out',
  rejected: 'rejected by the sandbox',
};

/** The status a person reads: "correct", "wrong results", … */
export function statusLabel(status: string): string {
  return STATUS_LABELS[status] ?? status.replace(/_/g, ' ');
}

export function pluralize(count: number, singular: string, plural = `${singular}s`): string {
  return `${count} ${count === 1 ? singular : plural}`;
}

/** Last path segment of a URI string, decoded: "file:///w/silu%20v2.py" -> "silu v2.py". */
export function uriBasename(uri: string): string {
  const path = uri.replace(/[?#].*$/, '');
  const segment = path.slice(path.lastIndexOf('/') + 1);
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
