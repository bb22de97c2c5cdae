/**
 * The search view's page (runs inside the webview): the beam tree of a search as it runs and
 * the best speedup per iteration. A click on a candidate asks the extension to open its diff.
 */

import { LineChart, TreeChart } from 'echarts/charts';
import { GridComponent, TitleComponent, TooltipComponent } from 'echarts/components';
import * as echarts from 'echarts/core';
import { CanvasRenderer } from 'echarts/renderers';

import { host, serve, themeColor } from './page';

import type { SearchViewModel } from '../src/searchTreeModel';

echarts.use([LineChart, TreeChart, GridComponent, TitleComponent, TooltipComponent, CanvasRenderer]);

const treeChart = echarts.init(document.getElementById('tree') as HTMLDivElement);
const bestChart = echarts.init(document.getElementById('best') as HTMLDivElement);
let current: SearchViewModel | undefined;

function draw(model: SearchViewModel): void {
  current = model;
  const fg = themeColor('--vscode-editor-foreground', '#cccccc');
  const muted = themeColor('--vscode-descriptionForeground', '#999999');
  const grid = themeColor('--vscode-editorWidget-border', '#444444');
  (document.getElementById('title') as HTMLElement).textContent = model.title;
  (document.getElementById('subtitle') as HTMLElement).textContent = model.subtitle;
  treeChart.setOption(
    {
      animation: false,
      tooltip: { trigger: 'item', formatter: (p: { name: string }) => p.name },
      series: [
        {
          type: 'tree',
          data: model.root ? [model.root] : [],
          top: 8,
          left: '22%', // inner nodes' labels sit to their left, leaves' to their right
          bottom: 8,
          right: '34%',
          symbolSize: 10,
          initialTreeDepth: -1,
          expandAndCollapse: false,
          label: { position: 'left', verticalAlign: 'middle', align: 'right', color: fg, fontSize: 12 },
          leaves: { label: { position: 'right', verticalAlign: 'middle', align: 'left' } },
          lineStyle: { color: grid },
        },
      ],
    },
    true,
  );
  bestChart.setOption(
    {
      animation: false,
      textStyle: { color: fg },
      title: { text: 'Best speedup per iteration', textStyle: { color: fg, fontSize: 13 } },
      tooltip: { trigger: 'axis' },
      grid: { left: 56, right: 24, top: 40, bottom: 32 },
      xAxis: { type: 'value', name: 'iteration', minInterval: 1, axisLabel: { color: muted } },
      yAxis: {
        type: 'value',
        name: '×',
        scale: true,
        axisLabel: { color: muted },
        splitLine: { lineStyle: { color: grid } },
      },
      series: [
        {
          type: 'line',
          data: model.best,
          symbolSize: 8,
          itemStyle: { color: themeColor('--vscode-charts-green', '#59a14f') },
        },
      ],
    },
    true,
  );
}

treeChart.on('click', (params) => {
  const id = (params.data as { id?: string } | null)?.id;
  if (id) {
    host.postMessage({ type: 'open', candidateId: id });
  }
});

/** For end-to-end tests: how many candidates are drawn (the root excluded). */
(window as unknown as { acceloptSearchTree: object }).acceloptSearchTree = {
  nodeCount: () => current?.counts.total ?? 0,
};

serve<SearchViewModel>(draw, [treeChart, bestChart]);
