/**
 * The timeline view's page (runs inside the webview): the engine lanes as a zoomable chart of
 * bars coloured by source line, and the roofline. It draws what the extension sends
 * (`TimelineViewModel`) and tells the extension which line a clicked bar belongs to.
 */

import { CustomChart, LineChart, ScatterChart } from 'echarts/charts';
import { DataZoomComponent, GridComponent, TitleComponent, TooltipComponent } from 'echarts/components';
import * as echarts from 'echarts/core';
import { CanvasRenderer } from 'echarts/renderers';

import { host, serve, themeColor } from './page';

import type { TimelineViewModel } from '../src/timelineModel';

echarts.use([
  CustomChart,
  LineChart,
  ScatterChart,
  DataZoomComponent,
  GridComponent,
  TitleComponent,
  TooltipComponent,
  CanvasRenderer,
]);

function theme(): { fg: string; muted: string; grid: string; accent: string } {
  return {
    fg: themeColor('--vscode-editor-foreground', '#cccccc'),
    muted: themeColor('--vscode-descriptionForeground', '#999999'),
    grid: themeColor('--vscode-editorWidget-border', '#444444'),
    accent: themeColor('--vscode-charts-blue', '#4e79a7'),
  };
}

const timelineChart = echarts.init(document.getElementById('timeline') as HTMLDivElement);
const rooflineChart = echarts.init(document.getElementById('roofline') as HTMLDivElement);
let current: TimelineViewModel | undefined;

function drawTimeline(model: TimelineViewModel): void {
  const colors = theme();
  const data = model.bars.map((bar) => ({
    value: [bar.lane, bar.start, bar.end, bar.line],
    itemStyle: { color: bar.color },
    name: bar.kind,
  }));
  timelineChart.setOption(
    {
      animation: false,
      textStyle: { color: colors.fg },
      tooltip: {
        formatter: (params: { name: string; value: number[] }) =>
          `line ${params.value[3]} · ${params.name} · ${(params.value[2] - params.value[1]).toFixed(3)} µs`,
      },
      grid: { left: 110, right: 24, top: 16, bottom: 64 },
      xAxis: {
        type: 'value',
        name: 'µs',
        min: 0,
        max: model.totalUs,
        axisLabel: { color: colors.muted },
        splitLine: { lineStyle: { color: colors.grid } },
      },
      yAxis: {
        type: 'category',
        data: model.lanes,
        inverse: true,
        axisLabel: { color: colors.fg },
        splitLine: { show: true, lineStyle: { color: colors.grid } },
      },
      dataZoom: [
        { type: 'inside', xAxisIndex: 0, filterMode: 'weakFilter' },
        { type: 'slider', xAxisIndex: 0, filterMode: 'weakFilter', height: 18, bottom: 12 },
      ],
      series: [
        {
          type: 'custom',
          encode: { x: [1, 2], y: 0 },
          data,
          renderItem: (
            _params: unknown,
            api: {
              value(i: number): number;
              coord(point: number[]): number[];
              size(point: number[]): number[];
              style(): object;
            },
          ) => {
            const lane = api.value(0);
            const start = api.coord([api.value(1), lane]);
            const end = api.coord([api.value(2), lane]);
            const height = api.size([0, 1])[1] * 0.6;
            return {
              type: 'rect',
              shape: { x: start[0], y: start[1] - height / 2, width: Math.max(end[0] - start[0], 1), height },
              style: api.style(),
            };
          },
        },
      ],
    },
    true,
  );
}

function drawRoofline(model: TimelineViewModel): void {
  const roofline = model.roofline;
  const element = document.getElementById('roofline') as HTMLDivElement;
  element.style.display = roofline ? 'block' : 'none';
  if (!roofline) {
    return;
  }
  const colors = theme();
  rooflineChart.setOption(
    {
      animation: false,
      textStyle: { color: colors.fg },
      title: {
        text: 'Roofline',
        subtext: `ridge at ${roofline.ridge.toFixed(1)} FLOP/byte`,
        textStyle: { color: colors.fg, fontSize: 13 },
        subtextStyle: { color: colors.muted },
      },
      tooltip: {
        formatter: (params: { seriesName: string; name: string; value: number[] }) =>
          `${params.name || params.seriesName}: ${params.value[0].toFixed(2)} FLOP/byte, ${(params.value[1] / 1e12).toFixed(3)} TFLOP/s`,
      },
      grid: { left: 80, right: 24, top: 56, bottom: 48 },
      xAxis: {
        type: 'log',
        name: 'FLOP / HBM byte',
        axisLabel: { color: colors.muted },
        splitLine: { lineStyle: { color: colors.grid } },
      },
      yAxis: {
        type: 'log',
        name: 'FLOP/s',
        axisLabel: { color: colors.muted },
        splitLine: { lineStyle: { color: colors.grid } },
      },
      series: [
        {
          name: 'roof',
          type: 'line',
          data: roofline.roof,
          showSymbol: false,
          lineStyle: { color: colors.muted },
        },
        {
          name: 'kernel',
          type: 'scatter',
          symbolSize: 12,
          itemStyle: { color: colors.accent },
          data: roofline.points
            .filter((p) => p.kind === 'kernel')
            .map((p) => ({ name: p.name, value: [p.intensity, p.flopsPerS] })),
        },
        {
          name: 'candidates',
          type: 'scatter',
          symbolSize: 8,
          itemStyle: { color: themeColor('--vscode-charts-green', '#59a14f') },
          data: roofline.points
            .filter((p) => p.kind === 'candidate')
            .map((p) => ({ name: p.name, value: [p.intensity, p.flopsPerS] })),
        },
      ],
    },
    true,
  );
}

function draw(model: TimelineViewModel): void {
  current = model;
  (document.getElementById('title') as HTMLElement).textContent = model.title;
  (document.getElementById('subtitle') as HTMLElement).textContent = model.subtitle || model.message;
  drawTimeline(model);
  drawRoofline(model);
}

timelineChart.on('click', (params: { value?: unknown }) => {
  const value = params.value as number[] | undefined;
  if (value && typeof value[3] === 'number') {
    host.postMessage({ type: 'reveal', line: value[3] });
  }
});

// A new theme: redraw in its colours.
new MutationObserver(() => current && draw(current)).observe(document.body, {
  attributes: true,
  attributeFilter: ['class'],
});

/** Where the i-th bar is drawn, in page pixels (for end-to-end tests that click a bar). */
(window as unknown as { acceloptTimeline: object }).acceloptTimeline = {
  barCount: () => current?.bars.length ?? 0,
  barAt(index: number):
    | {
        x: number;
        y: number;
        line: number;
        inChartX: number;
        inChartY: number;
        width: number;
        lane: number;
        start: number;
        end: number;
      }
    | undefined {
    const bar = current?.bars[index];
    if (!bar) {
      return undefined;
    }
    const [x, y] = timelineChart.convertToPixel({ gridIndex: 0 }, [
      (bar.start + bar.end) / 2,
      bar.lane,
    ]) as number[];
    const [left] = timelineChart.convertToPixel({ gridIndex: 0 }, [bar.start, bar.lane]) as number[];
    const [right] = timelineChart.convertToPixel({ gridIndex: 0 }, [bar.end, bar.lane]) as number[];
    const box = (document.getElementById('timeline') as HTMLElement).getBoundingClientRect();
    return {
      x: box.left + x,
      y: box.top + y,
      line: bar.line,
      inChartX: x,
      inChartY: y,
      width: right - left,
      lane: bar.lane,
      start: bar.start,
      end: bar.end,
    };
  },
};

serve<TimelineViewModel>(draw, [timelineChart, rooflineChart]);
