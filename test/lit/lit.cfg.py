# lit configuration of the modc compiler tests.
import os
import lit.formats

config.name = "modc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.modc_tools_dir), "test", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

path = [config.modc_tools_dir, config.modrun_dir, config.llvm_tools_dir]
config.environment["PATH"] = os.pathsep.join(path + [config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%examples", os.path.join(config.modc_src_root, "examples")))
config.substitutions.append(("%bench", os.path.join(config.modc_src_root, "bench")))

# nvcc (the CUDA Toolkit) compiles CUDA packages; tests that build one say
# REQUIRES: nvcc.
import shutil
nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
if nvcc:
    config.available_features.add("nvcc")
    config.environment["NVCC"] = nvcc
    config.substitutions.append(("%nvcc", nvcc))
    # ptxas sits beside nvcc in every CUDA Toolkit.
    config.substitutions.append(("%ptxas", os.path.join(os.path.dirname(os.path.realpath(nvcc)), "ptxas")))
# cuobjdump (with nvdisasm beside it) lists a package's SASS: the toolkit's,
# or pip's pinned copy that scripts/install-deps.sh installs. Tests use it
# under %if cuobjdump; %check-sass checks the listing (scripts/check-sass.py).
import glob
cuobjdump_dirs = ([os.path.dirname(os.path.realpath(nvcc))] if nvcc else []) + \
    sorted(glob.glob("/opt/modc-cuda-sass-*/nvidia/cu13/bin"), reverse=True)
on_path = shutil.which("cuobjdump")
if on_path:
    cuobjdump_dirs.insert(0, os.path.dirname(on_path))
for d in cuobjdump_dirs:
    if all(os.access(os.path.join(d, t), os.X_OK) for t in ("cuobjdump", "nvdisasm")):
        config.available_features.add("cuobjdump")
        config.environment["NVDISASM_PATH"] = d
        config.substitutions.append(("%cuobjdump", os.path.join(d, "cuobjdump")))
        break
config.substitutions.append(("%check-sass", "python3 " + os.path.join(config.modc_src_root, "scripts", "check-sass.py")))
# modc configured with CUTLASS's headers builds --cuda-gemms=cutlass
# packages (cmake/Cutlass.cmake); tests that do, with a stand-in nvcc, say
# REQUIRES: cutlass.
try:
    with open(os.path.join(os.path.dirname(config.modc_tools_dir), "CMakeCache.txt")) as cache:
        values = [l.rstrip("\n").split("=", 1)[-1] for l in cache
                  if l.startswith("MODC_CUTLASS_INCLUDE_DIR:")]
        if values and values[0] and not values[0].endswith("NOTFOUND"):
            config.available_features.add("cutlass")
            # nvcc's include flags for a kernel file, as modc passes them.
            config.substitutions.append(
                ("%cutlass-includes",
                 "-I" + values[0] + " -I" +
                 os.path.join(values[0], "..", "tools", "util", "include")))
except OSError:
    pass
config.substitutions.append(("%prelude", os.path.join(config.modc_src_root, "compiler", "lib", "Target", "Cuda", "prelude")))
config.substitutions.append(("%mainloops", os.path.join(config.modc_src_root, "compiler", "lib", "Target", "Mainloops", "Cuda")))
config.substitutions.append(("%cudaemu", os.path.join(config.modc_src_root, "test", "cuda_emu")))
# The generated CUDA row kernels and epilogues the tensor-core checks
# include (test/common/RowKernelsCuda.h, and its .inc that the build writes).
config.substitutions.append(("%rowkernels", "-I" + os.path.join(config.modc_src_root, "test", "common") + " -I" + os.path.join(os.path.dirname(config.modc_tools_dir), "test", "cuda_emu")))
# A machine with an NVIDIA GPU runs CUDA packages; tests of what happens
# without one say UNSUPPORTED: gpu.
if os.path.exists("/dev/nvidiactl"):
    config.available_features.add("gpu")
# A CPU with AVX-512 (the flags of x86-64-v4) runs packages compiled with
# --march=x86-64-v4; tests of the refusal elsewhere say UNSUPPORTED: avx512.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((l.split(":", 1)[1].split() for l in cpuinfo if l.startswith("flags")), [])
except OSError:
    flags = []
if all(f in flags for f in ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"]):
    config.available_features.add("avx512")
# Every flag as cpu-FLAG, spelled as /proc/cpuinfo does (cpu-avx512_fp16).
for f in flags:
    config.available_features.add("cpu-" + f)
# Data-parallel training (docs/distributed.md): tests that launch ranks need
# Open MPI's mpirun and the mpi plugin beside modrun, and say REQUIRES: mpi.
# %mpirun runs them over loopback only, as root if need be, with one OpenMP
# thread per rank (test machines may have 2 cores for 3 ranks).
mpirun = shutil.which("mpirun")
if mpirun and os.path.exists(os.path.join(config.modrun_dir, "libmodrt_mpi.so")):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.environment["OMPI_MCA_btl"] = "self,tcp"
    config.environment["OMPI_MCA_btl_tcp_if_include"] = "lo"
    config.environment["OMPI_MCA_oob_tcp_if_include"] = "lo"
    config.substitutions.append(
        ("%mpirun", mpirun + " --oversubscribe -x OMP_NUM_THREADS=1"))
# The NCCL backend runs one rank a GPU: its test needs the nccl plugin beside
# modrun and two GPUs or more, and says REQUIRES: nccl, gpus2.
if os.path.exists(os.path.join(config.modrun_dir, "libmodrt_nccl.so")):
    config.available_features.add("nccl")
nvidia_smi = shutil.which("nvidia-smi")
if nvidia_smi:
    import subprocess
    try:
        listed = subprocess.run([nvidia_smi, "-L"], capture_output=True,
                                text=True, timeout=60).stdout
        if sum(1 for l in listed.splitlines() if l.startswith("GPU ")) >= 2:
            config.available_features.add("gpus2")
    except (OSError, subprocess.SubprocessError):
        pass
