/**
 * What the search view draws: the beam tree (every candidate under the kernel it was made
 * from, labelled with its plan and speedup, the beam's survivors marked, failures dimmed) and
 * the best speedup after each iteration. Pure data for the webview and the tests.
 */

import type { SearchTree, TreeNode } from './protocol';

export interface TreeChartNode {
  name: string;
  /** The candidate id, for opening its diff. */
  id: string;
  value: number | null;
  itemStyle: { color: string; borderColor: string; borderWidth: number };
  label: { fontWeight: 'bold' | 'normal'; opacity: number };
  children: TreeChartNode[];
}

export interface SearchViewModel {
  title: string;
  subtitle: string;
  root: TreeChartNode | null;
  best: [number, number][];
  counts: { total: number; correct: number; failed: number };
}

const COLORS = {
  better: '#59a14f',
  worse: '#f28e2b',
  failed: '#e15759',
  pending: '#bab0ac',
  root: '#4e79a7',
};

function shortTitle(title: string, max = 36): string {
  return title.length <= max ? title : `${title.slice(0, max - 1)}…`;
}

function speedupText(speedup: number | null): string {
  return speedup === null ? '–' : `${speedup.toFixed(2)}×`;
}

function color(node: TreeNode): string {
  if (node.parentId === null) {
    return COLORS.root;
  }
  if (node.status === 'pending') {
    return COLORS.pending;
  }
  if (node.status !== 'ok') {
    return COLORS.failed;
  }
  return (node.speedup ?? 0) > 1.0 ? COLORS.better : COLORS.worse;
}

export function searchViewModel(tree: SearchTree): SearchViewModel {
  // Duplicates of a kernel already judged add nothing to look at: they are left out.
  const nodes = tree.nodes.filter((n) => n.duplicateOf === null);
  const byParent = new Map<string | null, TreeNode[]>();
  for (const node of nodes) {
    const siblings = byParent.get(node.parentId) ?? [];
    siblings.push(node);
    byParent.set(node.parentId, siblings);
  }
  const build = (node: TreeNode): TreeChartNode => {
    const children = (byParent.get(node.id) ?? []).sort((a, b) => (b.speedup ?? -1) - (a.speedup ?? -1));
    const survivor = node.inBeam ? ' ★' : '';
    const label =
      node.parentId === null ? tree.kernelName : `${speedupText(node.speedup)} ${shortTitle(node.title)}`;
    return {
      name: `${label}${survivor}`,
      id: node.id,
      value: node.speedup,
      itemStyle: {
        color: color(node),
        borderColor: node.inBeam ? '#edc948' : color(node),
        borderWidth: node.inBeam ? 3 : 1,
      },
      label: {
        fontWeight: node.inBeam ? 'bold' : 'normal',
        opacity: node.status === 'ok' || node.parentId === null ? 1 : 0.6,
      },
      children: children.map(build),
    };
  };
  const root = (byParent.get(null) ?? [])[0];
  const correct = nodes.filter((n) => n.parentId !== null && n.status === 'ok').length;
  const failed = nodes.filter(
    (n) => n.parentId !== null && n.status !== 'ok' && n.status !== 'pending',
  ).length;
  const best = tree.bestByIteration.map((value, index): [number, number] => [index + 1, value]);
  const last = best.length ? best[best.length - 1][1] : null;
  const state = tree.running ? `iteration ${tree.iteration + 1} of ${tree.totalIterations}` : 'finished';
  return {
    title: `Search on ${tree.kernelName}`,
    subtitle: `${state} · best ${speedupText(last)} · ${correct} correct, ${failed} failed · ★ kept in the beam`,
    root: root ? build(root) : null,
    best,
    counts: { total: nodes.length - (root ? 1 : 0), correct, failed },
  };
}
