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
// tile, plane), the planes in a grid-stride loop beyond 65535.
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
