"""`PodSleepClient` against emulated vLLM replicas over real sockets: sleep, wake and
is_sleeping with sleep mode on; a clear error naming the URL and the fix without it."""

from __future__ import annotations

import pytest

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import ReplicaConfig
from autoscaler.errors import ActuationError
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.sleep import PodSleepClient


async def test_sleep_wake_and_a_replica_without_sleep_mode() -> None:
    async with EmulatorFleet(speed=1.0) as fleet, LocalKubeAPI() as kube:
        on = await fleet.start_replica("on", config=ReplicaConfig(sleep_mode=True, wake_s=0.01))
        off = await fleet.start_replica("off")
        api = api_client_for(kube.url)
        client = PodSleepClient(api, sleep_timeout_s=5, wake_timeout_s=5)
        try:
            assert await client.is_sleeping(on.url) is False
            await client.sleep(on.url)
            assert on.sleep.is_sleeping and await client.is_sleeping(on.url) is True
            await client.wake(on.url)
            assert await client.is_sleeping(on.url) is False
            assert await client.is_sleeping(off.url) is None  # 404: not vLLM's answer
            with pytest.raises(ActuationError) as err:
                await client.sleep(off.url)
            message = str(err.value)
            assert message.startswith(f"POST {off.url}/sleep?level=1&mode=wait: HTTP 404")
            assert "--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1" in message
            with pytest.raises(ActuationError, match=r"patch pod llm/nope: HTTP 404"):
                await client.mark("llm", "nope", labels={"a": "b"}, annotations={})
        finally:
            await client.close()
            await api.close()
