/**
 * Candidates as read-only documents (`accelopt-candidate:` scheme), for `vscode.diff` against the
 * kernel's file as it is now.
 *
 * URI: accelopt-candidate:/<searchId>/<candidateId>/<file name>. The file name comes last so the
 * editor picks the language (Python highlighting) from it and shows it in the tab.
 */

import * as vscode from 'vscode';

import type { CandidateRef, CandidateStore, RankedCandidate } from './candidateStore';
import { formatSpeedup, measuredOn, uriBasename } from './format';

export const CANDIDATE_SCHEME = 'accelopt-candidate';

export function candidateUri(candidate: RankedCandidate): vscode.Uri {
  const segments = [candidate.searchId, candidate.info.id, uriBasename(candidate.uri) || 'kernel.py'];
  return vscode.Uri.from({
    scheme: CANDIDATE_SCHEME,
    path: `/${segments.map((segment) => encodeURIComponent(segment)).join('/')}`,
  });
}

export function parseCandidateUri(uri: vscode.Uri): CandidateRef | undefined {
  if (uri.scheme !== CANDIDATE_SCHEME) {
    return undefined;
  }
  const segments = uri.path.split('/').filter((segment) => segment !== '');
  if (segments.length < 2) {
    return undefined;
  }
  try {
    return { searchId: decodeURIComponent(segments[0]), candidateId: decodeURIComponent(segments[1]) };
  } catch {
    return undefined;
  }
}

export class CandidateContentProvider implements vscode.TextDocumentContentProvider {
  constructor(private readonly store: CandidateStore) {}

  provideTextDocumentContent(uri: vscode.Uri): string {
    const ref = parseCandidateUri(uri);
    const candidate = ref && this.store.find(ref);
    if (!candidate) {
      // Shown in place of the text: the search was replaced or the server restarted.
      return '# This AccelOpt candidate is no longer available (a newer search replaced it, or the server restarted).\n';
    }
    return candidate.info.text;
  }
}

/** The diff editor's title: "silu.py ↔ candidate 1: 1.84× (simulated on trn1)". */
export function diffTitle(candidate: RankedCandidate): string {
  const { info } = candidate;
  const name = uriBasename(candidate.uri);
  const which = candidate.position > 0 ? `candidate ${candidate.position}` : `candidate ${info.id}`;
  const figure =
    info.status === 'ok'
      ? `${formatSpeedup(info.speedup)} (${measuredOn(info.backend, info.hardware)})`
      : info.status;
  return `${name} ↔ ${which}: ${figure}`;
}

export async function showCandidateDiff(candidate: RankedCandidate): Promise<void> {
  const current = vscode.Uri.parse(candidate.uri);
  await vscode.commands.executeCommand(
    'vscode.diff',
    current,
    candidateUri(candidate),
    diffTitle(candidate),
    {
      preview: true,
    },
  );
}
