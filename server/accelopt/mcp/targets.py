"""The hardware the tools can target, from `accelopt.hardware.specs` (the numbers the timing model
and the roofline use; each is cited where it is defined), as a tool result and as a spec sheet."""

from __future__ import annotations

from accelopt.hardware.specs import HARDWARE_NAMES, HardwareSpec, get_hardware
from accelopt.mcp.models import TargetInfo

TARGETS = HARDWARE_NAMES
DESCRIPTIONS = {
    "trn1": "AWS Trainium (first generation), one NeuronCore-v2",
    "trn2": "AWS Trainium2, one NeuronCore-v3",
    "trn3": "AWS Trainium3, one NeuronCore-v4 (figures from the published specs only)",
}


def spec_sheet_uri(name: str) -> str:
    return f"accelopt://hardware/{name}"


def target_info(name: str) -> TargetInfo:
    spec = get_hardware(name)
    return TargetInfo(
        name=spec.name,
        description=DESCRIPTIONS.get(spec.name, spec.name),
        partitions=spec.partitions,
        tensor_clock_ghz=spec.tensor_clock_hz / 1e9,
        vector_clock_ghz=spec.vector_clock_hz / 1e9,
        scalar_clock_ghz=spec.scalar_clock_hz / 1e9,
        gpsimd_clock_ghz=spec.gpsimd_clock_hz / 1e9,
        tensor_bf16_tflops=round(spec.tensor_bf16_flops / 1e12, 3),
        roofline_matmul_tflops=round(spec.roofline_matmul_flops / 1e12, 3),
        roofline_vector_gflops=round(spec.roofline_vector_flops / 1e9, 3),
        roofline_hbm_gb_per_s=round(spec.roofline_hbm_bytes_per_s / 1e9, 3),
        hbm_gb_per_s=round(spec.hbm_bytes_per_s / 1e9, 3),
        sbuf_kib_per_partition=round(spec.sbuf_bytes_per_partition / 1024, 2),
        psum_kib_per_partition=round(spec.psum_bytes_per_partition / 1024, 2),
        psum_banks=spec.psum_banks,
        dma_engines=spec.dma_engines,
        spec_sheet=spec_sheet_uri(spec.name),
    )


def spec_sheet(name: str) -> str:
    """The spec sheet of one target, in Markdown: what an agent needs to reason about tiling,
    memory and the roofline before it asks for a profile."""
    spec: HardwareSpec = get_hardware(name)
    rows = [
        ("partitions (SBUF/PSUM rows, engine lanes)", f"{spec.partitions}"),
        ("Tensor Engine", f"{spec.pe_array}x{spec.pe_array} systolic array at {spec.tensor_clock_hz / 1e9:g} GHz"),
        ("Tensor Engine bf16 peak", f"{spec.tensor_bf16_flops / 1e12:.2f} TFLOP/s"),
        ("fp32 matmul", f"{spec.fp32_matmul_factor:.2f}x slower than bf16"),
        ("Vector Engine clock", f"{spec.vector_clock_hz / 1e9:g} GHz"),
        ("Scalar Engine clock", f"{spec.scalar_clock_hz / 1e9:g} GHz"),
        ("GpSimd Engine clock", f"{spec.gpsimd_clock_hz / 1e9:g} GHz"),
        ("SBUF per partition (usable)", f"{spec.sbuf_bytes_per_partition:,} bytes"),
        (
            "PSUM per partition",
            f"{spec.psum_bytes_per_partition:,} bytes in {spec.psum_banks} banks of {spec.psum_bank_bytes:,}",
        ),
        ("DMA engines", f"{spec.dma_engines}, {spec.dma_engine_bytes_per_s / 1e9:g} GB/s each"),
        ("HBM bandwidth (this core's share)", f"{spec.hbm_bytes_per_s / 1e9:g} GB/s"),
        ("fixed cost of one DMA transfer", f"{spec.dma_fixed_latency_s * 1e6:g} µs"),
        ("shortest instruction on an ALU engine", f"{spec.min_initiation_cycles} cycles"),
        ("Vector/GpSimd and Vector/Scalar port sharing", "yes" if spec.port_conflicts else "no"),
    ]
    roofline = [
        ("matmul (fp32 Tensor Engine)", f"{spec.roofline_matmul_flops / 1e12:.2f} TFLOP/s"),
        ("vector work", f"{spec.roofline_vector_flops / 1e9:.1f} GFLOP/s"),
        ("HBM traffic", f"{spec.roofline_hbm_bytes_per_s / 1e9:.1f} GB/s"),
    ]
    lines = [
        f"# {spec.name}: {DESCRIPTIONS.get(spec.name, spec.name)}",
        "",
        "The figures AccelOpt's NeuronCore simulator times kernels with. Profiles from the "
        "`simulator` backend are labelled `simulated on " + spec.name + "`; they model one NeuronCore.",
        "",
        "| resource | value |",
        "| --- | --- |",
        *(f"| {key} | {value} |" for key, value in rows),
        "",
        "## Roofline",
        "",
        "A kernel's roofline peak latency is the largest of its matmul FLOPs, vector FLOPs and HBM "
        "bytes, each divided by the rate below; percent of peak = peak latency / measured latency.",
        "",
        "| work | rate |",
        "| --- | --- |",
        *(f"| {key} | {value} |" for key, value in roofline),
        "",
        "## What it means for a kernel",
        "",
        f"- A tile has at most {spec.partitions} rows on the partition axis; the free axis is limited by "
        f"SBUF ({spec.sbuf_bytes_per_partition:,} bytes per partition for all live tiles).",
        f"- A matmul accumulates in PSUM: {spec.psum_banks} banks of {spec.psum_bank_bytes:,} bytes "
        "per partition, i.e. 512 fp32 values per bank.",
        "- Each DMA transfer pays a fixed cost; move large contiguous chunks (4 KiB or more per "
        "partition) rather than many small ones.",
        "- Elementwise work on the Vector and Scalar engines is cheap per element but every "
        f"instruction costs at least {spec.min_initiation_cycles} cycles: wide tiles amortise it.",
    ]
    return "\n".join(lines) + "\n"
