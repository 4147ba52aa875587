# syntax=docker/dockerfile:1
#
# One image for the three daemons: nsqd, nsqlookupd and nsqadmin. The command picks the daemon:
#
#   docker build -t nsq-trio .
#   docker run --rm -p 127.0.0.1:4150-4151:4150-4151 -v nsqd-data:/data nsq-trio \
#       nsqd --data-path=/data --broadcast-address=127.0.0.1
#   docker run --rm -p 127.0.0.1:4160-4161:4160-4161 nsq-trio nsqlookupd
#   docker run --rm -p 127.0.0.1:4171:4171 nsq-trio nsqadmin --nsqd-http-address=HOST:4151
#
# compose.yaml runs a whole cluster from it. The build stage installs the daemons and exactly the
# versions uv.lock pins for their run-time dependencies into a virtualenv; the final stage is a
# slim Python with that virtualenv and nothing else (no uv, no pip, no build tools, no
# test or development packages), run as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1
# the uv the Makefile uses
RUN python -m pip install uv==0.13.8
WORKDIR /src
COPY pyproject.toml uv.lock ./
COPY packages ./packages
RUN uv export --frozen --no-dev --no-emit-workspace \
        --package nsqd --package nsqlookupd --package nsqadmin \
        -o /tmp/requirements.txt \
 && python -m venv --without-pip /opt/nsq \
 && uv pip install --python /opt/nsq/bin/python --no-deps --require-hashes -r /tmp/requirements.txt \
 && uv pip install --python /opt/nsq/bin/python --no-deps \
        ./packages/common ./packages/serving ./packages/nsqd ./packages/nsqlookupd \
        ./packages/nsqadmin \
 && /opt/nsq/bin/nsqd --version \
 && /opt/nsq/bin/nsqlookupd --version \
 && /opt/nsq/bin/nsqadmin --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="nsq-trio" \
      org.opencontainers.image.description="NSQ (nsqd, nsqlookupd, nsqadmin) in Python on Trio"
RUN groupadd --system --gid 10001 nsq \
 && useradd --system --uid 10001 --gid nsq --no-create-home --home-dir /data \
        --shell /usr/sbin/nologin nsq \
 && mkdir /data \
 && chown nsq:nsq /data
COPY --from=build /opt/nsq /opt/nsq
ENV PATH=/opt/nsq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER nsq
WORKDIR /data
# A named volume mounted here starts out owned by the nsq user (it copies this directory).
VOLUME ["/data"]
# nsqd TCP/HTTP, nsqlookupd TCP/HTTP, nsqadmin HTTP
EXPOSE 4150 4151 4160 4161 4171
# The daemons save their state and exit 0 on SIGTERM (nsqd writes every message to disk).
STOPSIGNAL SIGTERM
ENTRYPOINT []
CMD ["nsqd", "--data-path=/data"]
