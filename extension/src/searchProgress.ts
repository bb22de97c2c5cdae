/**
 * What the progress notification says while a search runs, from the server's search states
 * (iteration boundaries, cost) and its candidate lists (which arrive within an iteration):
 * "iteration 2 of 16 · best 1.31× · 14 checked · $0.04" (no cost while nothing was spent, as with
 * the offline agents).
 *
 * "Iteration k of N" names the iteration under way (the server counts completed ones).
 */

import { formatDollars, formatSpeedup, isFaster } from './format';
import type { CandidatesNotification, SearchStateNotification } from './protocol';

export class SearchProgress {
  private started = false;
  private finished = false;
  private completed = 0;
  private total = 0;
  private dollars = 0;
  private stateBest: number | null = null;
  private listBest: number | null = null;
  private checked = 0;
  private lists = 0;

  /** Whether the server has said anything about this search yet. */
  get heard(): boolean {
    return this.started || this.lists > 0;
  }

  onState(state: SearchStateNotification): void {
    this.started = true;
    this.finished = state.state === 'finished';
    this.completed = state.iteration;
    this.total = state.totalIterations;
    this.dollars = state.dollars;
    this.stateBest = state.bestSpeedup;
  }

  onCandidates(list: CandidatesNotification): void {
    this.lists += 1;
    this.checked = list.candidates.filter((c) => c.status !== 'pending').length;
    const speedups = list.candidates
      .filter((c) => c.status === 'ok' && c.speedup !== null)
      .map((c) => c.speedup as number);
    this.listBest = speedups.length > 0 ? Math.max(...speedups) : null;
  }

  get message(): string {
    if (this.lists === 0 && !this.finished && this.completed === 0) {
      return this.started ? 'profiling the original kernel…' : 'starting…';
    }
    const parts: string[] = [];
    if (this.total > 0) {
      const current = this.finished ? this.completed : Math.min(this.completed + 1, this.total);
      parts.push(`iteration ${current} of ${this.total}`);
    }
    const best = this.best;
    // A best of 1.00× is the original kernel's own time, not a find.
    parts.push(isFaster(best) ? `best ${formatSpeedup(best)}` : 'no faster kernel yet');
    if (this.lists > 0) {
      parts.push(`${this.checked} checked`);
    }
    if (this.dollars > 0) {
      parts.push(formatDollars(this.dollars));
    }
    return parts.join(' · ');
  }

  /** Share of the iterations completed, 0-100. */
  get percent(): number {
    if (this.finished) {
      return 100;
    }
    return this.total > 0 ? Math.min(100, (100 * this.completed) / this.total) : 0;
  }

  private get best(): number | null {
    const known = [this.stateBest, this.listBest].filter(
      (v): v is number => v !== null && Number.isFinite(v),
    );
    return known.length > 0 ? Math.max(...known) : null;
  }
}
