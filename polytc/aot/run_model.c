/* run_model: runs a model exported by polytc on .npy files (polytc.aot; docs/export.md).

     run_model [-t THREADS] [-r REPEAT] -o OUTDIR IN0.npy IN1.npy ...

   The inputs are the model's graph inputs in order; each output is written to
   OUTDIR/<output name>.npy (characters other than letters, digits, '.', '-' and '_' in the
   name become '_').  The values of the model's symbolic dimensions are read off the input
   shapes.  -r runs the model REPEAT times and prints the median time of a run. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "model.h"

typedef struct {
  char descr[16];
  int rank;
  int64_t shape[32];
  void *data;
  size_t nbytes;
} npy;

static int fail(const char *fmt, const char *a, const char *b)
{
  fprintf(stderr, "run_model: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  return 1;
}

static size_t item_size(const char *descr)
{
  return (size_t)strtol(descr + 2, 0, 10);
}

/* Reads a version 1, 2 or 3 .npy file of a C-ordered array; 0 on success. */
static int npy_read(const char *path, npy *a)
{
  FILE *f = fopen(path, "rb");
  unsigned char magic[8];
  if (!f)
    return fail("cannot open %s: %s", path, strerror(errno));
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6)) {
    fclose(f);
    return fail("%s is not a .npy file%s", path, "");
  }
  size_t hlen = 0;
  unsigned char len[4] = {0};
  if (magic[6] == 1) {
    if (fread(len, 1, 2, f) != 2) { fclose(f); return fail("%s: truncated header%s", path, ""); }
    hlen = len[0] | (size_t)len[1] << 8;
  } else {
    if (fread(len, 1, 4, f) != 4) { fclose(f); return fail("%s: truncated header%s", path, ""); }
    hlen = len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24;
  }
  char *h = calloc(hlen + 1, 1);
  if (!h || fread(h, 1, hlen, f) != hlen) {
    free(h);
    fclose(f);
    return fail("%s: truncated header%s", path, "");
  }
  const char *d = strstr(h, "'descr':"), *o = strstr(h, "'fortran_order':"),
             *s = strstr(h, "'shape':");
  if (!d || !o || !s || sscanf(d + 8, " '%15[^']'", a->descr) != 1) {
    free(h);
    fclose(f);
    return fail("%s: cannot read the header%s", path, "");
  }
  if (strncmp(o + 16, " True", 5) == 0) {
    free(h);
    fclose(f);
    return fail("%s: a Fortran-ordered array; save it C-ordered (np.ascontiguousarray)%s",
                path, "");
  }
  const char *c = strchr(s, '(');
  a->rank = 0;
  size_t n = 1;
  for (c = c ? c + 1 : s; *c && *c != ')';) {
    char *end;
    long long v = strtoll(c, &end, 10);
    if (end == c) { ++c; continue; }
    if (a->rank == 32) { free(h); fclose(f); return fail("%s: too many axes%s", path, ""); }
    a->shape[a->rank++] = v;
    n *= (size_t)v;
    c = end;
  }
  free(h);
  a->nbytes = n * item_size(a->descr);
  a->data = malloc(a->nbytes ? a->nbytes : 1);
  if (!a->data || fread(a->data, 1, a->nbytes, f) != a->nbytes) {
    fclose(f);
    return fail("%s: the data is shorter than its shape says%s", path, "");
  }
  fclose(f);
  return 0;
}

static int npy_write(const char *path, const char *descr, int rank, const int64_t *shape,
                     const void *data, size_t nbytes)
{
  char h[512], dims[400] = "";
  for (int a = 0; a < rank; ++a) {
    char one[32];
    snprintf(one, sizeof one, "%lld,%s", (long long)shape[a], rank > 1 && a + 1 < rank ?
             " " : "");
    strcat(dims, one);
  }
  if (rank > 1)
    dims[strlen(dims) - 1] = 0;  /* (2, 3) but (3,) */
  int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr, dims);
  int total = (10 + n + 1 + 63) / 64 * 64;  /* the header ends in '\n' at 64 bytes */
  memset(h + n, ' ', (size_t)(total - 10 - n));
  h[total - 10 - 1] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f)
    return fail("cannot write %s: %s", path, strerror(errno));
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                           (unsigned char)((total - 10) & 255),
                           (unsigned char)((total - 10) >> 8)};
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)(total - 10), f) ==
           (size_t)(total - 10) && fwrite(data, 1, nbytes, f) == nbytes;
  ok = fclose(f) == 0 && ok;
  return ok ? 0 : fail("cannot write %s: %s", path, strerror(errno));
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  const char *outdir = 0;
  int threads = 0, repeat = 1, first = 1;
  for (; first < argc && argv[first][0] == '-' && argv[first][1]; first += 2) {
    if (first + 1 >= argc)
      return fail("%s needs a value%s", argv[first], "");
    if (!strcmp(argv[first], "-o"))
      outdir = argv[first + 1];
    else if (!strcmp(argv[first], "-t"))
      threads = atoi(argv[first + 1]);
    else if (!strcmp(argv[first], "-r"))
      repeat = atoi(argv[first + 1]);
    else
      return fail("unknown option %s%s", argv[first], "");
  }
  int nin = polytc_model_num_inputs(), nout = polytc_model_num_outputs();
  if (!outdir || argc - first != nin || repeat < 1) {
    fprintf(stderr, "usage: %s [-t THREADS] [-r REPEAT] -o OUTDIR", argv[0]);
    for (int i = 0; i < nin; ++i)
      fprintf(stderr, " %s.npy", polytc_model_input_name(i));
    fprintf(stderr, "\n");
    return 2;
  }
  npy *in = calloc((size_t)nin + 1, sizeof *in);
  const void **ptrs = calloc((size_t)nin + 1, sizeof *ptrs);
  int nd = polytc_model_num_dims();
  int64_t dims[64] = {0};
  if (!in || !ptrs || nd > 64)
    return fail("out of memory%s%s", "", "");
  for (int i = 0; i < nin; ++i) {
    const char *name = polytc_model_input_name(i), *want = polytc_model_input_dtype(i);
    if (npy_read(argv[first + i], &in[i]))
      return 1;
    if (strcmp(in[i].descr, want)) {
      fprintf(stderr, "run_model: input '%s' (%s) has dtype %s; the model wants %s\n", name,
              argv[first + i], in[i].descr, want);
      return 1;
    }
    if (in[i].rank != polytc_model_input_rank(i)) {
      fprintf(stderr, "run_model: input '%s' has rank %d; the model wants rank %d\n", name,
              in[i].rank, polytc_model_input_rank(i));
      return 1;
    }
    for (int a = 0; a < in[i].rank; ++a) {
      int64_t want_d = polytc_model_input_dim(i, a), got = in[i].shape[a];
      if (want_d >= 0 && got != want_d) {
        fprintf(stderr, "run_model: input '%s': axis %d is %lld; the model wants %lld\n",
                name, a, (long long)got, (long long)want_d);
        return 1;
      }
      if (want_d < 0) {
        int j = (int)(-want_d - 1);
        if (dims[j] && dims[j] != got) {
          fprintf(stderr, "run_model: input '%s': axis %d ('%s') is %lld, but %lld in an "
                  "earlier input\n", name, a, polytc_model_dim_name(j), (long long)got,
                  (long long)dims[j]);
          return 1;
        }
        dims[j] = got;
      }
    }
    ptrs[i] = in[i].data;
  }
  void **out = calloc((size_t)nout + 1, sizeof *out);
  int64_t (*shapes)[32] = calloc((size_t)nout + 1, sizeof *shapes);
  size_t *bytes = calloc((size_t)nout + 1, sizeof *bytes);
  if (!out || !shapes || !bytes)
    return fail("out of memory%s%s", "", "");
  for (int j = 0; j < nout; ++j) {
    polytc_model_output_shape(j, dims, shapes[j]);
    size_t n = item_size(polytc_model_output_dtype(j));
    for (int a = 0; a < polytc_model_output_rank(j); ++a)
      n *= (size_t)shapes[j][a];
    bytes[j] = n;
    out[j] = malloc(n ? n : 1);
    if (!out[j])
      return fail("out of memory%s%s", "", "");
  }
  polytc_model *m = polytc_model_create(threads);
  double *times = calloc((size_t)repeat, sizeof *times);
  if (!m || !times)
    return fail("out of memory%s%s", "", "");
  for (int r = 0; r < repeat; ++r) {
    double t0 = now();
    if (polytc_model_run(m, dims, ptrs, out))
      return fail("%s%s", polytc_model_error(m), "");
    times[r] = now() - t0;
  }
  if (repeat > 1) {
    qsort(times, (size_t)repeat, sizeof *times, by_value);
    printf("median %.3f ms, min %.3f ms over %d runs\n", 1e3 * times[repeat / 2],
           1e3 * times[0], repeat);
  }
  mkdir(outdir, 0777);  /* (it may exist) */
  for (int j = 0; j < nout; ++j) {
    char path[4096], name[1024];
    snprintf(name, sizeof name, "%s", polytc_model_output_name(j));
    for (char *c = name; *c; ++c)
      if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
            || *c == '.' || *c == '-' || *c == '_'))
        *c = '_';
    snprintf(path, sizeof path, "%s/%s.npy", outdir, name);
    if (npy_write(path, polytc_model_output_dtype(j), polytc_model_output_rank(j), shapes[j],
                  out[j], bytes[j]))
      return 1;
  }
  polytc_model_destroy(m);
  return 0;
}
