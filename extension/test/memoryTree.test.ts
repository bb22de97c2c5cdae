import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { MemoryTreeProvider, experienceDescription, fileName } from '../src/memoryTree';
import type { ExperienceInfo, MemoryResult } from '../src/protocol';
import { MarkdownString, type ThemeIcon } from './support/vscode';

function experience(id: number, overrides: Partial<ExperienceInfo> = {}): ExperienceInfo {
  return {
    id,
    title: `lesson ${id}`,
    speedup: 1.3,
    positive: true,
    kernelFamily: 'silu',
    hardware: 'trn1',
    backend: 'simulator',
    model: 'offline',
    createdAt: `2026-11-30T06:0${id}:00+00:00`,
    plan: `do thing ${id}`,
    ...overrides,
  };
}

describe('Memory tree', () => {
  it('lists lessons newest first, with effect, family and backend, and shows where the memory is', async () => {
    const result: MemoryResult = {
      path: '/home/me/.accelopt/memory.sqlite',
      experiences: [experience(1), experience(3, { positive: false, speedup: 0.8 }), experience(2)],
    };
    const tree = new MemoryTreeProvider(async () => result);
    let refreshes = 0;
    tree.onDidChangeTreeData(() => refreshes++);
    await tree.refresh();
    assert.equal(refreshes, 1);
    assert.equal(tree.path, '/home/me/.accelopt/memory.sqlite');
    assert.equal(tree.description, 'memory.sqlite', 'the header names the file, not its directory');
    const items = tree.getChildren().map((node) => tree.getTreeItem(node));
    assert.deepEqual(
      items.map((item) => item.label),
      ['lesson 3', 'lesson 2', 'lesson 1'],
    );
    assert.equal(items[0].description, '0.80× (slower) · silu · simulated on trn1');
    assert.equal((items[0].iconPath as ThemeIcon).id, 'arrow-down');
    assert.equal(items[1].description, '1.30× faster · silu · simulated on trn1');
    assert.match((items[1].tooltip as MarkdownString).value, /do thing 2/);
    assert.ok(
      (items[1].tooltip as MarkdownString).value.endsWith(
        'In the memory at /home/me/\\.accelopt/memory\\.sqlite',
      ),
      'the full path is in the tooltip',
    );
  });

  it('shortens a memory path to its file name, with either separator', () => {
    assert.equal(fileName('/tmp/accelopt-editor-e2e.U1k0EP/state/memory.sqlite'), 'memory.sqlite');
    assert.equal(fileName('C:\\Users\\me\\memory.sqlite'), 'memory.sqlite');
    assert.equal(fileName('memory.sqlite'), 'memory.sqlite');
    assert.equal(fileName('/data/memory/'), 'memory');
  });

  it('shares one request between refreshes that overlap', async () => {
    let requests = 0;
    const tree = new MemoryTreeProvider(async () => {
      requests++;
      return { path: 'm', experiences: [] };
    });
    await Promise.all([tree.refresh(), tree.refresh(), tree.refresh()]);
    assert.equal(requests, 1);
    await tree.refresh();
    assert.equal(requests, 2);
  });

  it('is empty with no server (the welcome text explains) and says when the memory cannot be read', async () => {
    let answer: () => Promise<MemoryResult | undefined> = async () => undefined;
    const tree = new MemoryTreeProvider(() => answer());
    await tree.refresh();
    assert.deepEqual(tree.getChildren(), []);
    answer = () => Promise.reject(new Error('database is locked'));
    await tree.refresh();
    const [node] = tree.getChildren();
    const item = tree.getTreeItem(node);
    assert.equal(item.label, 'Could not read the optimization memory');
    assert.match(String(item.tooltip), /database is locked/);
  });

  it('describes a lesson without a family', () => {
    assert.equal(
      experienceDescription(experience(1, { kernelFamily: '', backend: 'neuron' })),
      '1.30× faster · measured on trn1',
    );
  });
});
