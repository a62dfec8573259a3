// philox.cuh: Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), the
// counter-based generator of every random mask minidl draws on the GPU: dropout (kernels/dropout.cu) and
// the dropout on attention's probabilities (kernels/attention.cu). The NumPy reference is philox4x32 in
// minidl/primitives/cpu/dropout.py; the two agree bit for bit.
#pragma once

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u  // golden ratio
#define PHILOX_W1 0xBB67AE85u  // sqrt(3) - 1

// One Philox4x32 round: two 32x32 -> 64-bit products, their halves crossed and mixed with the key.
__host__ __device__ __forceinline__ uint4 philox_round(uint4 c, uint2 k)
{
#ifdef __CUDA_ARCH__
    const unsigned int hi0 = __umulhi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
    const unsigned int hi1 = __umulhi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
#else
    const unsigned long long p0 = (unsigned long long)PHILOX_M0 * c.x;
    const unsigned long long p1 = (unsigned long long)PHILOX_M1 * c.z;
    const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
#endif
    uint4 r;
    r.x = hi1 ^ c.y ^ k.x;
    r.y = lo1;
    r.z = hi0 ^ c.w ^ k.y;
    r.w = lo0;
    return r;
}

// Philox4x32-10: 10 rounds, the key bumped by the Weyl constants between rounds.
__host__ __device__ __forceinline__ uint4 philox4x32_10(uint4 counter, uint2 key)
{
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key.x += PHILOX_W0;
            key.y += PHILOX_W1;
        }
        counter = philox_round(counter, key);
    }
    return counter;
}
