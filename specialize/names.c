/*
 * names: which identifiers a kernel may give its parameters, variables
 * and local arrays (docs/ir.md, "Names").
 *
 * The emitters never write an IR name bare: parameters become p_<name>,
 * variables v_<name>, local arrays l_<name> (jit/emit_c.c), and the cpu
 * backend names its libgccjit locals itself (t<N>, v<N>, ...; jit/cpu.c).
 * So no IR name can meet the emitters' own names (ks_t<N>, ksh_*, ks_lane)
 * or the language's.  The rule below is stricter than that on purpose: a
 * name is refused when it is a word of the text form (it would read as
 * that word), or when, written bare, it would be a C, C++ (CUDA), OpenCL C
 * or CUDA keyword, type or builtin the emitters use, or would start with
 * a prefix that C or the emitters keep for themselves.  A future emitter
 * that writes names bare, a dump read by a person, a kernel pasted into C
 * by hand: none of them can then mistake a name for something else.
 *
 * One list for the verifier (which refuses such names in any kernel, the
 * library's included) and the parser (which says where the name stands).
 */
#include "specialize.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Exact words, in no particular order. */
static const char *const words[] = {
	/* the text form (print.c) */
	"kernel", "variant", "entry", "nlanes", "param", "buffer", "scalar",
	"bound", "dims", "local", "var", "uniform", "lane", "grid", "body",
	"decl", "for", "to", "step", "unroll", "if", "else", "lanes",
	"barrier", "prefetch", "group", "true", "false", "inf", "nan", "min",
	"max", "fma", "select", "reduce_sum", "reduce_max", "neg", "abs",
	"sqrt", "exp", "f16bits", "qdot", "i64", "f32", "bool", "i32", "u8",
	"f16", "bf16", "read", "write", "readwrite",
	/* Not the block formats q8_0, q4_0 and q4_k: they stand only as a
	 * buffer's dtype in its param line, where no name can, and the
	 * library's attention names its query registers q<group>_<row>. */
	/* C11 and C23 keywords (those with _ and a capital are a prefix) */
	"auto", "break", "case", "char", "const", "continue", "default", "do",
	"double", "enum", "extern", "float", "goto", "inline", "int", "long",
	"register", "restrict", "return", "short", "signed", "sizeof",
	"static", "struct", "switch", "typedef", "union", "unsigned", "void",
	"volatile", "while", "alignas", "alignof", "constexpr", "nullptr",
	"static_assert", "thread_local", "typeof", "typeof_unqual",
	/* C++ keywords (CUDA C is C++) */
	"and", "and_eq", "asm", "bitand", "bitor", "catch", "char8_t",
	"char16_t", "char32_t", "class", "co_await", "co_return", "co_yield",
	"compl", "concept", "const_cast", "consteval", "constinit", "decltype",
	"delete", "dynamic_cast", "explicit", "export", "friend", "mutable",
	"namespace", "new", "noexcept", "not", "not_eq", "operator", "or",
	"or_eq", "private", "protected", "public", "reinterpret_cast",
	"requires", "static_cast", "template", "this", "throw", "try",
	"typeid", "typename", "using", "virtual", "wchar_t", "xor", "xor_eq",
	"final", "override",
	/* OpenCL C keywords and types */
	"global", "constant", "read_only", "write_only", "read_write", "pipe",
	"half", "uchar", "ushort", "uint", "ulong", "size_t", "ptrdiff_t",
	"intptr_t", "uintptr_t", "sampler_t", "event_t", "image1d_t",
	"image1d_array_t", "image1d_buffer_t", "image2d_t", "image2d_array_t",
	"image3d_t", "complex", "imaginary", "quad",
	/* CUDA built-in variables and types */
	"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3",
	/* functions the emitters call (jit/cuda.c, jit/opencl.c, emit_c.c,
	 * helpers.c), and their usual relatives */
	"fmaf", "sqrtf", "fabs", "fabsf", "fmin", "fminf", "fmax", "fmaxf",
	"expf", "rint", "rintf", "trunc", "truncf", "get_local_id",
	"get_group_id", "get_global_id", "get_local_size", "get_num_groups",
	"mem_fence", "printf",
};

/* Prefixes: C keeps __ and _ with a capital; the emitters ks_ and ksh_
 * (kspec's types, helpers, temporaries), OpenCL's builtin families
 * convert_* and as_*, and its fence flags CLK_*. */
static const char *const prefixes[] = {
	"__", "ks_", "ksh_", "KS_", "KSH_", "convert_", "as_", "CLK_",
};

/* Vector types of OpenCL C and CUDA: a scalar type and a width. */
static const char *const vec_bases[] = {
	"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
	"float", "double", "half", "bool", "longlong", "ulonglong",
};

static int is_vector_type(const char *s, size_t n)
{
	static const char *const widths[] = { "1", "2", "3", "4", "8", "16" };
	size_t i, j, b;

	for (i = 0; i < sizeof vec_bases / sizeof *vec_bases; i++) {
		b = strlen(vec_bases[i]);
		if (n <= b || memcmp(s, vec_bases[i], b) != 0)
			continue;
		for (j = 0; j < sizeof widths / sizeof *widths; j++)
			if (n - b == strlen(widths[j]) &&
			    memcmp(s + b, widths[j], n - b) == 0)
				return 1;
	}
	return 0;
}

/* The words sorted and the prefixes' lengths, once: every verify asks about every name, and a
 * kernel of the library is verified after each pass at every probe. */
#define NWORDS (sizeof words / sizeof *words)
#define NPREFIXES (sizeof prefixes / sizeof *prefixes)
static const char *sorted[NWORDS];
static size_t prefix_len[NPREFIXES];
static pthread_once_t sorted_once = PTHREAD_ONCE_INIT;

static int cmp_words(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void sort_words(void)
{
	size_t i;

	memcpy(sorted, words, sizeof words);
	qsort(sorted, NWORDS, sizeof *sorted, cmp_words);
	for (i = 0; i < NPREFIXES; i++)
		prefix_len[i] = strlen(prefixes[i]);
}

/* Whether S (N bytes, not NUL-terminated) is one of the words. */
static int is_word(const char *s, size_t n)
{
	size_t lo = 0, hi = NWORDS;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strncmp(s, sorted[mid], n);

		if (c == 0 && sorted[mid][n] != '\0')
			c = -1;         /* S is a proper prefix of the word */
		if (c == 0)
			return 1;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

const char *ks_ir_name_reserved(const char *s, size_t n)
{
	size_t i;

	if (memchr(s, '\0', n))
		return NULL;    /* not a name: is_ident's to refuse */
	pthread_once(&sorted_once, sort_words);
	if (is_word(s, n))
		return "a word of the text form or a keyword, type or "
		    "builtin of C, CUDA or OpenCL";
	for (i = 0; i < NPREFIXES; i++)
		if (n >= prefix_len[i] &&
		    memcmp(s, prefixes[i], prefix_len[i]) == 0)
			return "a prefix kept by C or the code generators";
	if (n >= 2 && s[0] == '_' && s[1] >= 'A' && s[1] <= 'Z')
		return "a prefix kept by C or the code generators";
	/* A vector type ends in its width. */
	if (n >= 2 && s[n - 1] >= '0' && s[n - 1] <= '9' &&
	    is_vector_type(s, n))
		return "a vector type of CUDA or OpenCL";
	return NULL;
}
