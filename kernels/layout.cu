// layout_transform: a tensor's values in the other memory format, channels-first (NCHW, NCDHW) <-> channels-last
// (NHWC, NDHWC) -- cuDNN's cudnnTransformTensor, for the layout only. The tensor-core convolutions read NHWC
// only, so a channels-first network transposes around each of them (6 copies per layer and training step).
//
// Both directions are one batched transpose: x holds `batch` planes of rows x cols elements, y the same planes
// transposed (cols x rows). NCHW -> NHWC: a plane per image, rows = C, cols = H*W; NHWC -> NCHW: rows = H*W,
// cols = C. A copy through the array library reads one side with a stride (each warp touching 32 cache lines
// per load or per store); here a block moves a 32 x 32 tile through shared memory, so that both the loads and
// the stores of a warp are 32 consecutive elements. The tile's row is padded by one element so that a warp's
// reads of a tile column fall into 32 different banks (4-byte elements; 2-byte elements share banks in pairs,
// which costs a little). Elements are copied as their bits (T: an unsigned integer of the element's size):
// the transform never rounds.
//
// Thread mapping: a block of 32 x 8 threads per tile, each thread 4 rows of it; blockIdx = (column tile, row
// tile, plane), the planes in a grid-stride loop beyond 65535. 2-byte elements with even rows and columns take
// layout_transform_pairs instead: 64 x 64 tiles moved as 4-byte pairs, so that a warp's access is 128 bytes
// (32 single 2-byte elements would be 64, with twice the instructions per byte).
template <typename T>
__global__ void __launch_bounds__(256) layout_transform(const T* __restrict__ x, T* __restrict__ y,
                                                        long long batch, int rows, int cols)
{
    __shared__ T tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const long long plane = (long long)rows * cols;
    for (long long n = blockIdx.z; n < batch; n += gridDim.z) {
        const T* src = x + n * plane;
        T* dst = y + n * plane;
#pragma unroll
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[i][threadIdx.x] = src[(long long)r * cols + c];
        }
        __syncthreads();
#pragma unroll
        for (int i = threadIdx.y; i < 32; i += 8) {
            const int c = c0 + i, r = r0 + threadIdx.x;
            if (r < rows && c < cols) dst[(long long)c * rows + r] = tile[threadIdx.x][i];
        }
        __syncthreads();
    }
}

// 16-bit elements, rows and cols even: a 64 x 64 tile per block of 32 x 8 threads. A thread loads pairs of adjacent
// columns of 8 rows (one 4-byte load each), and stores pairs of adjacent rows of 8 columns: output row c gets
// (tile[2t][c], tile[2t + 1][c]) as one 4-byte store. Row pitch 66: even (4-byte aligned pairs), and the column
// reads of the store phase fall into 16 banks (2-way conflicts) instead of 1.
// Pair: the 4-byte type a pair moves as (unsigned int).
template <typename Pair>
__global__ void __launch_bounds__(256) layout_transform_pairs(const Pair* __restrict__ x, Pair* __restrict__ y,
                                                              long long batch, int rows, int cols)
{
    static_assert(sizeof(Pair) == 4, "a pair of 2-byte elements");
    __shared__ unsigned short tile[64][66];
    const int c0 = blockIdx.x * 64, r0 = blockIdx.y * 64, t = threadIdx.x;
    const long long plane = (long long)rows * cols / 2;   // in pairs
    for (long long n = blockIdx.z; n < batch; n += gridDim.z) {
        const Pair* src = x + n * plane;
        Pair* dst = y + n * plane;
#pragma unroll
        for (int i = threadIdx.y; i < 64; i += 8) {
            const int r = r0 + i, c = c0 + 2 * t;
            if (r < rows && c < cols) *reinterpret_cast<Pair*>(&tile[i][2 * t]) = src[((long long)r * cols + c) / 2];
        }
        __syncthreads();
#pragma unroll
        for (int j = threadIdx.y; j < 64; j += 8) {
            const int c = c0 + j, r = r0 + 2 * t;
            if (r < rows && c < cols)
                dst[((long long)c * rows + r) / 2] = tile[2 * t][j] | ((Pair)tile[2 * t + 1][j] << 16);
        }
        __syncthreads();
    }
}
