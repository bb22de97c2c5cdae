/**
 * Checks that a message from the real server has exactly the shape protocol.ts declares: every
 * declared field present with its declared type (extra fields are allowed: the server may add
 * optional ones). A renamed or retyped field on either side fails here.
 */

import assert from 'node:assert/strict';

type Check = (value: unknown) => boolean;
type Shape = Record<string, Check>;

const isString: Check = (v) => typeof v === 'string';
const isNumber: Check = (v) => typeof v === 'number' && Number.isFinite(v);
const isInteger: Check = (v) => Number.isInteger(v);
const isBoolean: Check = (v) => typeof v === 'boolean';
const nullable =
  (check: Check): Check =>
  (v) =>
    v === null || check(v);
const oneOf =
  (...values: string[]): Check =>
  (v) =>
    typeof v === 'string' && values.includes(v);
const arrayOf =
  (check: Check): Check =>
  (v) =>
    Array.isArray(v) && v.every(check);

export function assertShape(value: unknown, shape: Shape, what: string): void {
  assert.ok(value !== null && typeof value === 'object', `${what}: not an object: ${JSON.stringify(value)}`);
  const record = value as Record<string, unknown>;
  for (const [field, check] of Object.entries(shape)) {
    assert.ok(field in record, `${what}: missing field "${field}" in ${JSON.stringify(value).slice(0, 300)}`);
    assert.ok(
      check(record[field]),
      `${what}.${field}: unexpected value ${JSON.stringify(record[field])?.slice(0, 200)}`,
    );
  }
}

const candidateInfo: Shape = {
  id: isString,
  rank: isInteger,
  speedup: nullable(isNumber),
  latencyMs: nullable(isNumber),
  percentOfPeak: nullable(isNumber),
  status: oneOf(
    'ok',
    'syntax_error',
    'compile_error',
    'runtime_error',
    'incorrect',
    'timeout',
    'rejected',
    'pending',
  ),
  title: isString,
  rationale: arrayOf(isString),
  text: isString,
  diff: isString,
  backend: oneOf('simulator', 'neuron'),
  hardware: isString,
};

export function assertCandidatesNotification(value: unknown): void {
  assertShape(
    value,
    {
      searchId: isString,
      uri: isString,
      kernelName: isString,
      documentVersion: nullable(isInteger),
      running: isBoolean,
      candidates: Array.isArray,
    },
    'CandidatesNotification',
  );
  (value as { candidates: unknown[] }).candidates.forEach((c, i) =>
    assertShape(c, candidateInfo, `candidates[${i}]`),
  );
}

export function assertSearchState(value: unknown): void {
  assertShape(
    value,
    {
      searchId: isString,
      uri: isString,
      kernelName: isString,
      state: oneOf('started', 'iteration', 'finished'),
      iteration: isInteger,
      totalIterations: isInteger,
      bestSpeedup: nullable(isNumber),
      dollars: isNumber,
      message: isString,
    },
    'SearchStateNotification',
  );
}

export function assertOptimizeResult(value: unknown): void {
  assertShape(
    value,
    {
      searchId: isString,
      reason: oneOf('completed', 'budget', 'early_stop', 'target_reached', 'cancelled', 'error'),
      message: isString,
      bestSpeedup: nullable(isNumber),
      candidates: isInteger,
    },
    'OptimizeResult',
  );
}

export function assertApplyResult(value: unknown): void {
  assertShape(value, { applied: isBoolean, message: isString }, 'ApplyResult');
}

export function assertMemoryResult(value: unknown): void {
  assertShape(value, { experiences: Array.isArray, path: isString }, 'MemoryResult');
  (value as { experiences: unknown[] }).experiences.forEach((e, i) =>
    assertShape(
      e,
      {
        id: isInteger,
        title: isString,
        speedup: isNumber,
        positive: isBoolean,
        kernelFamily: isString,
        hardware: isString,
        backend: isString,
        model: isString,
        createdAt: isString,
        plan: isString,
      },
      `experiences[${i}]`,
    ),
  );
}
