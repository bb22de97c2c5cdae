import * as assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { SearchTree, TreeNode } from '../src/protocol';
import { searchViewModel } from '../src/searchTreeModel';

function node(id: string, parentId: string | null, over: Partial<TreeNode> = {}): TreeNode {
  return {
    id,
    parentId,
    iteration: parentId ? 1 : 0,
    title: parentId ? `plan ${id}` : 'baseline',
    status: 'ok',
    speedup: parentId ? 1.2 : 1.0,
    inBeam: false,
    duplicateOf: null,
    ...over,
  };
}

const tree: SearchTree = {
  searchId: 's1',
  kernelName: 'silu_kernel',
  running: true,
  iteration: 1,
  totalIterations: 3,
  nodes: [
    node('c0', null, { inBeam: true }),
    node('c1', 'c0', { speedup: 2.13, inBeam: true }),
    node('c2', 'c0', { speedup: 0.9 }),
    node('c3', 'c0', { status: 'incorrect', speedup: null }),
    node('c4', 'c1', { speedup: 2.5, iteration: 2 }),
    node('c5', 'c0', { duplicateOf: 'c1' }),
  ],
  bestByIteration: [2.13],
};

describe('search view model', () => {
  it('builds the beam tree under the baseline, fastest child first, duplicates left out', () => {
    const model = searchViewModel(tree);
    assert.ok(model.root);
    assert.equal(model.root.name, 'silu_kernel ★');
    assert.deepEqual(
      model.root.children.map((c) => c.id),
      ['c1', 'c2', 'c3'],
    );
    assert.deepEqual(
      model.root.children[0].children.map((c) => c.id),
      ['c4'],
    );
    assert.equal(model.counts.total, 4);
  });

  it('marks the survivors and dims the failures', () => {
    const [kept, slower, failed] = searchViewModel(tree).root!.children;
    assert.equal(kept.name, '2.13× plan c1 ★');
    assert.equal(kept.itemStyle.borderWidth, 3);
    assert.equal(slower.label.opacity, 1);
    assert.equal(failed.label.opacity, 0.6);
    assert.notEqual(kept.itemStyle.color, slower.itemStyle.color);
    assert.notEqual(failed.itemStyle.color, slower.itemStyle.color);
  });

  it('charts the best speedup per iteration and says where the search is', () => {
    const model = searchViewModel(tree);
    assert.deepEqual(model.best, [[1, 2.13]]);
    assert.match(model.subtitle, /iteration 2 of 3 · best 2\.13× · 3 correct, 1 failed/);
    const done = searchViewModel({ ...tree, running: false });
    assert.match(done.subtitle, /^finished/);
  });
});
