#!/bin/bash
# VAE with DDP on Frontier (OLCF): AMD MI250X, Slingshot 11 (cxi).
#
#   sbatch -A <project> examples/vae/script/job-vae-frontier.sh [vae-ddp.py options]
#   (other data: DDSTORE_VAE_DATA=/path/to/fashion-mnist sbatch ..., or --data DIR;
#   a directory of MNIST-format idx files, plain or .gz)
#
# METHOD=0 (MPI RMA, default), METHOD=1 (libfabric cxi, reads into GPU memory
# with --gpu-dest and out of GPU shards with --gpu-source).
#SBATCH -J ddstore-vae
#SBATCH -N 2
#SBATCH -t 00:20:00
#SBATCH -p batch
#SBATCH -o %x-%j.out
#SBATCH --network=single_node_vni,job_vni
set -euo pipefail

module load PrgEnv-gnu cray-mpich rocm libfabric     # the site's libfabric (cxi provider)
source "${DDSTORE_VENV:-$HOME/ddstore/.venv}/bin/activate"
cd "${DDSTORE_TOP:-$HOME/ddstore}"

export DDSTORE_METHOD=${METHOD:-1}
export DDSTORE_FABRIC=cxi
# pyddstore sets FI_CXI_DISABLE_HOST_REGISTER=1 on import (ROCm registration of
# CXI host buffers fails after fork); exporting it here covers tools that
# start libfabric before importing pyddstore.
export FI_CXI_DISABLE_HOST_REGISTER=1
export MPICH_GPU_SUPPORT_ENABLED=0          # ddstore moves the GPU data, not MPI
export OMP_NUM_THREADS=7
NT=$(( SLURM_JOB_NUM_NODES * 8 ))           # one rank per GCD

srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" -c 7 --gpus-per-task=1 --gpu-bind=closest \
    python examples/vae/vae-ddp.py --num-workers=1 --threads 7 "$@"

if [ "$DDSTORE_METHOD" != 0 ]; then
    # GPUDirect: shards in GPU memory, batches read straight into GPU memory
    srun -N "$SLURM_JOB_NUM_NODES" -n "$NT" -c 7 --gpus-per-task=1 --gpu-bind=closest \
        python examples/vae/vae-ddp.py --num-workers=1 --threads 7 --gpu-dest --gpu-source "$@"
fi
