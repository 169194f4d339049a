#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "rpc/types.h"

START_TEST(rpc_method_paths_are_built_from_service_and_name)
{
    const rpc_method_t *m = rpc_method_get(RPC_PS_PUSH);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->path, "/tessera.v1.ParameterServer/Push");
    ck_assert_str_eq(m->service, "tessera.v1.ParameterServer");
    ck_assert_str_eq(m->name, "Push");
    ck_assert_int_eq(m->kind, RPC_KIND_UNARY);
    ck_assert_ptr_eq(m->request, &tessera__v1__push_request__descriptor);
    ck_assert_ptr_eq(m->response, &tessera__v1__push_response__descriptor);
    ck_assert_str_eq(rpc_method_get(RPC_HEALTH_CHECK)->path, "/grpc.health.v1.Health/Check");
    ck_assert_int_eq(rpc_method_get(RPC_COORD_WATCH_JOB)->kind, RPC_KIND_SERVER_STREAM);
    ck_assert_int_eq(rpc_method_get(RPC_WORKER_COLLECTIVE)->kind, RPC_KIND_BIDI_STREAM);
}
END_TEST

START_TEST(rpc_method_table_agrees_with_the_proto_descriptors)
{
    /* Every row must name a method the .proto declares, with the same message types. */
    static const ProtobufCServiceDescriptor *const services[] = {
        &grpc__health__v1__health__descriptor, &tessera__v1__parameter_server__descriptor,
        &tessera__v1__worker__descriptor, &tessera__v1__coordinator__descriptor,
        &tessera__v1__diagnostics__descriptor};
    size_t declared = 0;
    for (size_t s = 0; s < sizeof(services) / sizeof(services[0]); s++)
        declared += services[s]->n_methods;
    ck_assert_uint_eq(declared, RPC_METHOD_COUNT_);
    for (int i = 0; i < RPC_METHOD_COUNT_; i++) {
        const rpc_method_t *m = rpc_method_get((rpc_method_id_t)i);
        int found = 0;
        for (size_t s = 0; s < sizeof(services) / sizeof(services[0]); s++) {
            if (strcmp(services[s]->name, m->service) != 0)
                continue;
            for (unsigned k = 0; k < services[s]->n_methods; k++) {
                const ProtobufCMethodDescriptor *md = &services[s]->methods[k];
                if (strcmp(md->name, m->name) == 0) {
                    ck_assert_ptr_eq(md->input, m->request);
                    ck_assert_ptr_eq(md->output, m->response);
                    found = 1;
                }
            }
        }
        ck_assert_msg(found, "%s is not declared in the protos", m->path);
    }
}
END_TEST

START_TEST(rpc_method_find_takes_unterminated_paths_and_rejects_unknown_ones)
{
    const char buf[] = "/tessera.v1.Diagnostics/EchoXXXX";
    ck_assert_ptr_eq(rpc_method_find(buf, strlen("/tessera.v1.Diagnostics/Echo")),
                     rpc_method_get(RPC_DIAG_ECHO));
    ck_assert_ptr_null(rpc_method_find(buf, strlen(buf)));
    ck_assert_ptr_null(rpc_method_find("/tessera.v1.Diagnostics/Ech", 27));
    ck_assert_ptr_null(rpc_method_find("", 0));
    ck_assert_ptr_null(rpc_method_get(RPC_METHOD_COUNT_));
    for (int i = 0; i < RPC_METHOD_COUNT_; i++) {
        const rpc_method_t *m = rpc_method_get((rpc_method_id_t)i);
        ck_assert_int_eq(m->id, i);
        ck_assert_ptr_eq(rpc_method_find(m->path, strlen(m->path)), m);
    }
}
END_TEST

START_TEST(rpc_services_are_known_by_full_name)
{
    ck_assert(rpc_service_known("tessera.v1.ParameterServer"));
    ck_assert(rpc_service_known("grpc.health.v1.Health"));
    ck_assert(!rpc_service_known("tessera.v1.Parameter"));
    ck_assert(!rpc_service_known(""));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpc_methods");
    TCase *tc = tcase_create("rpc_methods");
    tcase_add_test(tc, rpc_method_paths_are_built_from_service_and_name);
    tcase_add_test(tc, rpc_method_table_agrees_with_the_proto_descriptors);
    tcase_add_test(tc, rpc_method_find_takes_unterminated_paths_and_rejects_unknown_ones);
    tcase_add_test(tc, rpc_services_are_known_by_full_name);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
