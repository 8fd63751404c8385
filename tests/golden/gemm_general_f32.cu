/*
 * kspec gemm.general, CUDA C, 32 lanes per work-group.
 * Generated from the kernel's IR; do not edit.
 */
/* Compiled with --fmad=false --prec-div=true --prec-sqrt=true --ftz=false. */
typedef long long ks_i64;
typedef unsigned int ks_u32;
typedef unsigned short ks_u16;

static __device__ __forceinline__ ks_i64 ksh_imin(ks_i64 a, ks_i64 b)
{
	return a < b ? a : b;
}

/* The canonical tree over 32 lanes: t[l] = t[l] op t[l + s], s = 16 .. 1. */
static __device__ __forceinline__ float ksh_reduce_sum_f32(float v)
{
	v = v + __shfl_down_sync(0xffffffffu, v, 16);
	v = v + __shfl_down_sync(0xffffffffu, v, 8);
	v = v + __shfl_down_sync(0xffffffffu, v, 4);
	v = v + __shfl_down_sync(0xffffffffu, v, 2);
	v = v + __shfl_down_sync(0xffffffffu, v, 1);
	return __shfl_sync(0xffffffffu, v, 0);
}

extern "C" __global__ void __launch_bounds__(32)
ks_gemm_general(
	const float *__restrict__ p_x,
	const float *__restrict__ p_W,
	float *p_y,
	ks_i64 p_M,
	ks_i64 p_N,
	ks_i64 p_K)
{
	const ks_i64 ks_lane = (ks_i64)threadIdx.x;
	const ks_i64 ks_group = (ks_i64)blockIdx.x;

	ks_i64 v_nb = ((p_N + 3LL) / 4LL);
	ks_i64 v_m = (ks_group / v_nb);
	ks_i64 v_n0 = ((ks_group % v_nb) * 4LL);
	ks_i64 v_xo = (v_m * p_K);
	ks_i64 v_yo = ((v_m * p_N) + v_n0);
	ks_i64 v_wo0 = (ksh_imin(v_n0, (p_N - 1LL)) * p_K);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1LL), (p_N - 1LL)) * p_K);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2LL), (p_N - 1LL)) * p_K);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3LL), (p_N - 1LL)) * p_K);
	float v_acc0 = 0.0f;
	float v_acc1 = 0.0f;
	float v_acc2 = 0.0f;
	float v_acc3 = 0.0f;
	for (ks_i64 v_k0 = 0LL; v_k0 < (p_K - (p_K % 32LL)); v_k0 += 32LL) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_k = (v_k0 + ks_lane);
			float v_xv = (p_x[(v_xo + v_k)]);
			v_acc0 = fmaf(v_xv, (p_W[(v_wo0 + v_k)]), v_acc0);
			v_acc1 = fmaf(v_xv, (p_W[(v_wo1 + v_k)]), v_acc1);
			v_acc2 = fmaf(v_xv, (p_W[(v_wo2 + v_k)]), v_acc2);
			v_acc3 = fmaf(v_xv, (p_W[(v_wo3 + v_k)]), v_acc3);
		}
	}
	if (((p_K % 32LL) != 0LL)) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_kt = ((p_K - (p_K % 32LL)) + ks_lane);
			if ((v_kt < p_K)) {
				float v_xt = (p_x[(v_xo + v_kt)]);
				v_acc0 = fmaf(v_xt, (p_W[(v_wo0 + v_kt)]), v_acc0);
				v_acc1 = fmaf(v_xt, (p_W[(v_wo1 + v_kt)]), v_acc1);
				v_acc2 = fmaf(v_xt, (p_W[(v_wo2 + v_kt)]), v_acc2);
				v_acc3 = fmaf(v_xt, (p_W[(v_wo3 + v_kt)]), v_acc3);
			}
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_acc0);
	if ((v_n0 < p_N)) {
		{
			const ks_i64 ks_t1 = v_yo;
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = (ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_acc1);
	if (((v_n0 + 1LL) < p_N)) {
		{
			const ks_i64 ks_t4 = (v_yo + 1LL);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = (ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_acc2);
	if (((v_n0 + 2LL) < p_N)) {
		{
			const ks_i64 ks_t7 = (v_yo + 2LL);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = (ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_acc3);
	if (((v_n0 + 3LL) < p_N)) {
		{
			const ks_i64 ks_t10 = (v_yo + 3LL);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = (ks_t11);
		}
	}
}
