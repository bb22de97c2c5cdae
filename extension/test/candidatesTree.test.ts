import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { CandidateStore } from '../src/candidateStore';
import { CandidatesTreeProvider, type CandidatesNode } from '../src/candidatesTree';
import { ClientCommands } from '../src/clientCommands';
import { candidate, candidates, searchState } from './support/fixtures';
import { MarkdownString, TreeItemCollapsibleState, type ThemeIcon } from './support/vscode';

function tooltipText(tooltip: unknown): string {
  return tooltip instanceof MarkdownString ? tooltip.value : String(tooltip);
}

describe('Candidates tree', () => {
  it('shows kernels, then ranked candidates with speedup, percent of peak, status and backend', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applyCandidates(
      candidates('s1', [
        candidate('c1', {
          rank: 2,
          speedup: 1.2345,
          percentOfPeak: 0.612,
          title: 'hoist the weight load',
          rationale: ['widen the tiles', 'hoist the weight load'],
        }),
        candidate('c2', {
          rank: 1,
          speedup: 2.5,
          percentOfPeak: 0.05,
          title: 'fuse the activation',
          hardware: 'trn2',
          backend: 'neuron',
        }),
      ]),
    );

    const [kernel] = tree.getChildren();
    const kernelItem = tree.getTreeItem(kernel);
    assert.equal(kernelItem.label, 'silu_kernel');
    assert.equal(kernelItem.collapsibleState, TreeItemCollapsibleState.Expanded);
    assert.equal(kernelItem.contextValue, 'accelopt.kernel.running');
    assert.equal(kernelItem.description, 'best 2.50× · starting… · silu.py · measured on trn2');

    const items = tree.getChildren(kernel).map((node) => tree.getTreeItem(node));
    assert.equal(items[0].label, '1. 2.50×', 'rank and speedup only: the plan must fit in a narrow sidebar');
    assert.equal(items[0].description, 'fuse the activation · 5.0% of peak');
    assert.equal(items[1].label, '2. 1.23×');
    assert.equal(items[1].description, 'hoist the weight load · 61% of peak');
    assert.equal(items[1].contextValue, 'accelopt.candidate.ok');
    assert.equal((items[1].iconPath as ThemeIcon).id, 'pass');
    const tooltip = tooltipText(items[1].tooltip);
    assert.match(tooltip, /1\. widen the tiles\n2\. hoist the weight load/);
    assert.match(tooltip, /speedup 1\.23× · 20\.0 µs · 61% of peak \(simulated on trn1\)/);
    assert.match(tooltip, /Correct: same results as the original kernel/);
    assert.deepEqual(items[1].command, {
      command: ClientCommands.showDiff,
      title: 'Show Diff',
      arguments: [{ searchId: 's1', candidateId: 'c1' }],
    });
  });

  it('collects failed candidates under one collapsed node, never offered for accepting', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applyCandidates(
      candidates(
        's1',
        [
          candidate('good'),
          candidate('bad', { status: 'incorrect', speedup: null, title: 'drop the bounds check' }),
        ],
        { running: false },
      ),
    );
    const [kernel] = tree.getChildren();
    assert.equal(
      tree.getTreeItem(kernel).description,
      'best 1.50× · 1 candidate · silu.py · simulated on trn1',
    );
    const children = tree.getChildren(kernel);
    assert.deepEqual(
      children.map((node) => node.kind),
      ['candidate', 'failed'],
    );
    const failedItem = tree.getTreeItem(children[1]);
    assert.equal(failedItem.label, '1 candidate failed their checks');
    assert.equal(failedItem.collapsibleState, TreeItemCollapsibleState.Collapsed);
    const [bad] = tree.getChildren(children[1]).map((node) => tree.getTreeItem(node));
    assert.equal(bad.label, 'drop the bounds check');
    assert.equal(bad.description, 'wrong results');
    assert.equal(bad.contextValue, 'accelopt.candidate.failed');
  });

  it('says what a running search with no candidates yet is doing, with its iteration', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applySearchState(searchState('s1', { iteration: 1, totalIterations: 3 }));
    const [kernel] = tree.getChildren();
    assert.equal(
      tree.getTreeItem(kernel).description,
      'iteration 2 of 3 · silu.py',
      'one done, the second under way',
    );
    const [message] = tree.getChildren(kernel) as CandidatesNode[];
    const item = tree.getTreeItem(message);
    assert.equal(item.label, 'Waiting for the first candidate…');
    assert.equal((item.iconPath as ThemeIcon).id, 'loading~spin');
  });

  it('after an accept, marks the applied candidate and the outdated rest (no Accept on them)', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applyCandidates(
      candidates('s1', [candidate('a', { speedup: 2 }), candidate('b', { speedup: 1.5 })], {
        running: false,
      }),
    );
    store.markApplied({ searchId: 's1', candidateId: 'a' });
    const [kernel] = tree.getChildren();
    assert.equal(
      tree.getTreeItem(kernel).description,
      '2.00× applied (candidate 1) · silu.py · simulated on trn1',
    );
    const [applied, outdated] = tree.getChildren(kernel).map((node) => tree.getTreeItem(node));
    assert.equal(applied.contextValue, 'accelopt.candidate.applied');
    assert.equal(applied.description, 'applied · plan a · 40% of peak');
    assert.equal(outdated.contextValue, 'accelopt.candidate.outdated');
    assert.equal(outdated.description, 'outdated · plan b · 40% of peak');
    assert.match(tooltipText(outdated.tooltip), /before another candidate was applied/);
  });

  it('keeps the green check for real gains: a 1.00× rewrite is neutral and says "no faster"', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applyCandidates(
      candidates(
        's1',
        [
          candidate('win', { rank: 1, speedup: 1.07, percentOfPeak: 0.3, title: 'fuse into one silu' }),
          candidate('same', { rank: 2, speedup: 1.004, percentOfPeak: 0.28, title: 'reorder the loops' }),
          candidate('slow', { rank: 3, speedup: 0.9, percentOfPeak: 0.25, title: 'split the tiles' }),
        ],
        { running: false },
      ),
    );
    const [kernel] = tree.getChildren();
    const [win, same, slow] = tree.getChildren(kernel).map((node) => tree.getTreeItem(node));
    assert.equal(win.label, '1. 1.07×');
    assert.equal(win.description, 'fuse into one silu · 30% of peak');
    assert.equal((win.iconPath as ThemeIcon).id, 'pass');
    assert.equal(same.label, '2. 1.00×');
    assert.equal(same.description, 'no faster · reorder the loops · 28% of peak');
    assert.equal((same.iconPath as ThemeIcon).id, 'circle-outline');
    assert.equal(same.contextValue, 'accelopt.candidate.ok', 'correct, so it can still be accepted');
    assert.equal(slow.label, '3. 0.90× (slower)');
    assert.equal(slow.description, 'split the tiles · 25% of peak', 'the label already says slower');
    assert.equal((slow.iconPath as ThemeIcon).id, 'circle-outline');
  });

  it('says "none faster" on the kernel row when no candidate beats the original', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applyCandidates(
      candidates('s1', [candidate('a', { speedup: 1 }), candidate('b', { speedup: 0.999 })], {
        running: false,
      }),
    );
    const [kernel] = tree.getChildren();
    assert.equal(
      tree.getTreeItem(kernel).description,
      'none faster · 2 candidates · silu.py · simulated on trn1',
    );
    // While it runs, nothing is claimed yet: the iteration leads.
    store.applyCandidates(candidates('s2', [candidate('c', { speedup: 1 })]));
    store.applySearchState(searchState('s2', { iteration: 0, totalIterations: 40 }));
    const [running] = tree.getChildren();
    assert.equal(tree.getTreeItem(running).description, 'iteration 1 of 40 · silu.py · simulated on trn1');
  });

  it('mentions the cost in the kernel tooltip only once something was spent', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    store.applySearchState(searchState('s1', { iteration: 1, totalIterations: 4, dollars: 0 }));
    const tooltipOf = (): string => tooltipText(tree.getTreeItem(tree.getChildren()[0]).tooltip);
    assert.match(tooltipOf(), /Iterations done: 1 of 4\n/);
    assert.doesNotMatch(tooltipOf(), /\$/);
    store.applySearchState(searchState('s1', { iteration: 2, totalIterations: 4, dollars: 0.0421 }));
    assert.match(tooltipOf(), /Iterations done: 2 of 4, cost so far \$0\.04\n/);
  });

  it('refreshes the view whenever the store changes', () => {
    const store = new CandidateStore();
    const tree = new CandidatesTreeProvider(store);
    let refreshes = 0;
    tree.onDidChangeTreeData(() => refreshes++);
    store.applyCandidates(candidates('s1', [candidate('a')]));
    store.remove({ searchId: 's1', candidateId: 'a' });
    assert.equal(refreshes, 2);
    assert.deepEqual(tree.getChildren(), [{ kind: 'kernel', group: store.kernels()[0] }]);
  });
});
