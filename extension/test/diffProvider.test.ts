import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { beforeEach, describe, it } from 'node:test';

import { CandidateStore } from '../src/candidateStore';
import {
  CANDIDATE_SCHEME,
  CandidateContentProvider,
  candidateUri,
  diffTitle,
  parseCandidateUri,
  showCandidateDiff,
} from '../src/diffProvider';
import { KERNEL_URI, candidate, candidates } from './support/fixtures';
import { Uri, mock } from './support/vscode';

describe('candidate documents', () => {
  beforeEach(() => mock.reset());

  it('names a candidate by search and id, ending in the kernel file name, and parses back', () => {
    const store = new CandidateStore();
    store.applyCandidates(candidates('search/1 #a', [candidate('c?2&x', { speedup: 1.84 })]));
    const ranked = store.find({ searchId: 'search/1 #a', candidateId: 'c?2&x' });
    assert.ok(ranked);
    const uri = candidateUri(ranked);
    assert.equal(uri.scheme, CANDIDATE_SCHEME);
    assert.ok(uri.path.endsWith('/silu.py'), 'the language comes from the file name');
    const again = Uri.parse(uri.toString());
    assert.deepEqual(parseCandidateUri(again), { searchId: 'search/1 #a', candidateId: 'c?2&x' });
    assert.equal(parseCandidateUri(Uri.parse(KERNEL_URI)), undefined);
  });

  it('serves the candidate text, and says so when the candidate is gone', () => {
    const store = new CandidateStore();
    store.applyCandidates(
      candidates('s1', [candidate('c1', { text: 'def silu_kernel(x):\n    return x\n' })]),
    );
    const provider = new CandidateContentProvider(store);
    const uri = candidateUri(store.find({ searchId: 's1', candidateId: 'c1' })!);
    assert.equal(provider.provideTextDocumentContent(uri), 'def silu_kernel(x):\n    return x\n');
    store.clear();
    assert.match(provider.provideTextDocumentContent(uri), /no longer available/);
  });

  it('opens vscode.diff from the file as it is to the candidate, titled with the figures', async () => {
    const store = new CandidateStore();
    store.applyCandidates(candidates('s1', [candidate('c1', { speedup: 1.84 })]));
    const ranked = store.find({ searchId: 's1', candidateId: 'c1' })!;
    await showCandidateDiff(ranked);
    const [call] = mock.executed;
    assert.equal(call.command, 'vscode.diff');
    const [left, right, title] = call.args as [Uri, Uri, string];
    assert.equal(left.toString(), KERNEL_URI);
    assert.equal(right.toString(), candidateUri(ranked).toString());
    assert.equal(title, 'silu.py ↔ candidate 1: 1.84× (simulated on trn1)');
    assert.equal(diffTitle(ranked), title);
  });
});
